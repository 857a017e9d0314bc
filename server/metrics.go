package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gosling-ai/gosling/engine"
)

// metrics are SGLang's serving metrics under the "gosling:" prefix (SGLang
// writes "sglang:"), so dashboards built for one work for the other after a
// rename. Each Server has its own registry: several servers (tests) may
// share a process.
type metrics struct {
	reg       *prometheus.Registry
	ttft      prometheus.Histogram
	itl       prometheus.Histogram
	e2e       prometheus.Histogram
	prompt    prometheus.Counter
	generated prometheus.Counter
	requests  prometheus.Counter
	aborted   prometheus.Counter
}

// Buckets reach down to a millisecond: small models on a CPU are fast, and
// the upper end covers long generations of big ones.
var (
	latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160}
	itlBuckets     = []float64{0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4}
	e2eBuckets     = []float64{0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 150, 200, 300, 500, 1000}
)

func newMetrics(eng *engine.Engine, modelName string) *metrics {
	labels := prometheus.Labels{"model_name": modelName}
	m := &metrics{reg: prometheus.NewRegistry()}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gosling:" + name, Help: help, Buckets: buckets, ConstLabels: labels})
		m.reg.MustRegister(h)
		return h
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "gosling:" + name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gosling:" + name, Help: help, ConstLabels: labels}, f))
	}
	m.ttft = histogram("time_to_first_token_seconds", "Time from submitting a request to the engine to its first generated token.", latencyBuckets)
	m.itl = histogram("inter_token_latency_seconds", "Time between consecutive generated tokens of a request.", itlBuckets)
	m.e2e = histogram("e2e_request_latency_seconds", "Time from submitting a request to the engine to its end.", e2eBuckets)
	m.prompt = counter("prompt_tokens_total", "Prompt tokens of finished requests.")
	m.generated = counter("generation_tokens_total", "Tokens generated for finished requests.")
	m.requests = counter("requests_total", "Generation requests finished (one per choice of n).")
	m.aborted = counter("aborted_requests_total", "Generation requests aborted (client gone, /abort_request, shutdown).")

	gauge("num_running_reqs", "Requests being decoded.", func() float64 { return float64(eng.Stats().Running) })
	gauge("num_queue_reqs", "Requests waiting for admission.", func() float64 { return float64(eng.Stats().Waiting) })
	// Pages held only by the prefix cache are reclaimable, so they count as
	// free (SGLang counts evictable tokens as available too). Cached pages
	// that running requests share are thus counted free: a small undercount.
	gauge("token_usage", "Fraction of the KV cache pages in use by requests.", func() float64 {
		st := eng.Stats()
		if st.KVPagesTotal == 0 {
			return 0
		}
		return float64(max(st.KVPagesTotal-st.KVPagesFree-st.KVPagesCached, 0)) / float64(st.KVPagesTotal)
	})
	gauge("cache_hit_rate", "Fraction of prompt tokens served from the prefix cache, since the start.", func() float64 {
		st := eng.Stats()
		if total := st.CachedTokens + st.PromptTokens; total > 0 {
			return float64(st.CachedTokens) / float64(total)
		}
		return 0
	})
	gauge("gen_throughput", "Generated tokens per second, over the interval since the previous sample (at least 1 s).",
		newThroughput(eng).rate)
	if eng.SpecStats().Algorithm != "" {
		gauge("spec_accept_length", "Speculative decoding: mean tokens emitted per verify step (accepted drafts plus one), since the start.",
			func() float64 { return eng.SpecStats().AcceptLength() })
		// Draft-tree nodes by where their verdict was drawn: on the
		// device (greedy argmax or spec_verify) or by the host sampler
		// (logprobs, penalties, grammars, CPU engines).
		for _, where := range []string{"device", "host"} {
			l := prometheus.Labels{"model_name": modelName, "where": where}
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gosling:spec_verified_nodes_total",
				Help:        "Speculative decoding: draft-tree nodes verified, by where the verdict was drawn.",
				ConstLabels: l}, func() float64 {
				ss := eng.SpecStats()
				if where == "device" {
					return float64(ss.DeviceVerifiedNodes)
				}
				return float64(ss.HostVerifiedNodes)
			}))
		}
	}
	// Steps by CUDA graph path, one series per kind of step (decode,
	// verify, draft) and path (replayed, captured, eager); all zero
	// where the engine runs no graphs.
	for k, kind := range []string{"decode", "verify", "draft"} {
		for p, path := range []string{"replayed", "captured", "eager"} {
			l := prometheus.Labels{"model_name": modelName, "step": kind, "path": path}
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gosling:cuda_graph_steps_total",
				Help:        "Forward steps by kind and CUDA graph path: replayed from a captured graph, captured into a new one, or run eagerly although a graph was wanted.",
				ConstLabels: l}, func() float64 {
				var c [3]engine.GraphCounts
				c[0], c[1], c[2] = eng.Stats().GraphPaths()
				return float64([]int{c[k].Replays, c[k].Captures, c[k].Eager}[p])
			}))
		}
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gosling:num_retractions_total",
		Help: "Requests retracted for lack of KV pages and re-queued.", ConstLabels: labels},
		func() float64 { return float64(eng.Stats().Retractions) }))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observe records a finished (or aborted) request.
func (m *metrics) observe(res *engine.Result, elapsed time.Duration) {
	m.requests.Inc()
	m.prompt.Add(float64(len(res.PromptIDs)))
	m.generated.Add(float64(len(res.OutputIDs)))
	m.e2e.Observe(elapsed.Seconds())
	if res.FinishReason == engine.FinishAbort {
		m.aborted.Inc()
	}
}

// throughput derives tokens/s from the engine's generated-token counter.
// It samples when scraped, keeping the last rate until a second has passed,
// so frequent scrapes do not read noise.
type throughput struct {
	eng      *engine.Engine
	mu       sync.Mutex
	lastAt   time.Time
	lastToks int
	lastRate float64
}

func newThroughput(eng *engine.Engine) *throughput {
	return &throughput{eng: eng, lastAt: time.Now(), lastToks: eng.Stats().GeneratedTokens}
}

func (t *throughput) rate() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now, toks := time.Now(), t.eng.Stats().GeneratedTokens
	if dt := now.Sub(t.lastAt).Seconds(); dt >= 1 {
		t.lastRate = float64(toks-t.lastToks) / dt
		t.lastAt, t.lastToks = now, toks
	}
	return t.lastRate
}
