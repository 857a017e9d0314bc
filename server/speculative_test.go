package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/model/eagle"
	"github.com/gosling-ai/gosling/model/random"
	"github.com/gosling-ai/gosling/server"
)

// TestSpeculativeVisible: with NGRAM speculation the accept length shows
// per request (meta_info), in /get_server_info and in /metrics.
func TestSpeculativeVisible(t *testing.T) {
	testEngine(t) // skips without the model
	ts := specServer(t, engine.Config{ModelPath: modelPath(t), SpeculativeAlgorithm: "NGRAM", Logger: quietLogger()})
	story := "Once upon a time, there was a little girl named Lily. She loved to play outside. Once upon a time, there was a little girl named Lily."
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{"text": story,
		"sampling_params": map[string]any{"temperature": 0, "max_new_tokens": 64}})
	if status != http.StatusOK {
		t.Fatalf("/generate: %d %v", status, out)
	}
	meta := out["meta_info"].(map[string]any)
	if ct, _ := meta["spec_verify_ct"].(float64); ct <= 0 {
		t.Errorf("meta_info.spec_verify_ct = %v", meta["spec_verify_ct"])
	}
	if al, _ := meta["spec_accept_length"].(float64); al <= 1 {
		t.Errorf("meta_info.spec_accept_length = %v, want > 1 for a story that repeats", meta["spec_accept_length"])
	}
	status, info := call(t, "GET", ts.URL+"/get_server_info", nil)
	if status != http.StatusOK || info["speculative_algorithm"] != "NGRAM" || info["speculative_num_draft_tokens"] != float64(8) {
		t.Errorf("get_server_info: %d, algorithm %v, draft tokens %v", status, info["speculative_algorithm"], info["speculative_num_draft_tokens"])
	}
	state := info["internal_states"].([]any)[0].(map[string]any)
	if al, _ := state["avg_spec_accept_length"].(float64); al <= 1 {
		t.Errorf("internal_states.avg_spec_accept_length = %v", state["avg_spec_accept_length"])
	}
	checkAcceptLengthMetric(t, ts.URL)
	checkGraphSteps(t, ts.URL)
}

// TestEagleVisible: with an EAGLE-3 head (random weights, so its accept
// length is about 1 and says nothing of a trained head's) the verify
// steps and the accept length show in meta_info, /get_server_info and
// /metrics as for the other algorithms.
func TestEagleVisible(t *testing.T) {
	testEngine(t) // skips without the model
	ck, err := model.Open(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	head := filepath.Join(t.TempDir(), "eagle3")
	err = eagle.WriteRandom(head, &ck.Config, random.EagleOptions{Eagle3: true, AuxLayerIDs: []int{0, 2, 3}})
	ck.Close()
	if err != nil {
		t.Fatal(err)
	}
	ts := specServer(t, engine.Config{ModelPath: modelPath(t), SpeculativeAlgorithm: "EAGLE3", SpeculativeDraftModelPath: head, Logger: quietLogger()})
	status, out := call(t, "POST", ts.URL+"/generate", map[string]any{"text": "Lily saw a big dog",
		"sampling_params": map[string]any{"temperature": 0, "max_new_tokens": 32}})
	if status != http.StatusOK {
		t.Fatalf("/generate: %d %v", status, out)
	}
	meta := out["meta_info"].(map[string]any)
	if ct, _ := meta["spec_verify_ct"].(float64); ct <= 0 {
		t.Errorf("meta_info.spec_verify_ct = %v", meta["spec_verify_ct"])
	}
	if al, _ := meta["spec_accept_length"].(float64); al < 1 {
		t.Errorf("meta_info.spec_accept_length = %v, want at least 1", meta["spec_accept_length"])
	}
	status, info := call(t, "GET", ts.URL+"/get_server_info", nil)
	if status != http.StatusOK || info["speculative_algorithm"] != "EAGLE3" || info["speculative_num_draft_tokens"] != float64(8) ||
		info["speculative_eagle_topk"] != float64(4) || info["speculative_num_steps"] != float64(5) {
		t.Errorf("get_server_info: %d, algorithm %v, steps %v, topk %v, draft tokens %v", status, info["speculative_algorithm"],
			info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"])
	}
	state := info["internal_states"].([]any)[0].(map[string]any)
	if al, _ := state["avg_spec_accept_length"].(float64); al < 1 || state["spec_verify_steps"].(float64) <= 0 {
		t.Errorf("internal_states: avg_spec_accept_length %v, spec_verify_steps %v", state["avg_spec_accept_length"], state["spec_verify_steps"])
	}
	// On the CPU every tree node is decided on the host.
	if host, _ := state["spec_host_verified_nodes"].(float64); host < state["spec_verify_steps"].(float64) || state["spec_device_verified_nodes"] != float64(0) {
		t.Errorf("internal_states: spec_host_verified_nodes %v, spec_device_verified_nodes %v", state["spec_host_verified_nodes"], state["spec_device_verified_nodes"])
	}
	checkAcceptLengthMetric(t, ts.URL)
	checkGraphSteps(t, ts.URL)
}

// specServer serves an engine of cfg for the test.
func specServer(t *testing.T, cfg engine.Config) *httptest.Server {
	t.Helper()
	eng, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := server.New(eng, server.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

func checkAcceptLengthMetric(t *testing.T, url string) {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "gosling:spec_accept_length{") {
		t.Errorf("/metrics has no gosling:spec_accept_length")
	}
	// On the CPU every draft-tree node's verdict is the host sampler's.
	nodes := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "gosling:spec_verified_nodes_total{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		for _, where := range []string{"device", "host"} {
			if strings.Contains(line, `where="`+where+`"`) {
				nodes[where] = v
			}
		}
	}
	if nodes["host"] <= 0 || nodes["device"] != 0 {
		t.Errorf("/metrics gosling:spec_verified_nodes_total = %v, want host > 0 and device 0 on the CPU", nodes)
	}
}

// checkGraphSteps: /get_server_info (internal_states.cuda_graph_steps)
// and /metrics (gosling:cuda_graph_steps_total) both give the decode,
// verify and draft steps by CUDA graph path, and the same counts.
func checkGraphSteps(t *testing.T, url string) {
	t.Helper()
	_, info := call(t, "GET", url+"/get_server_info", nil)
	steps, _ := info["internal_states"].([]any)[0].(map[string]any)["cuda_graph_steps"].(map[string]any)
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, kind := range []string{"decode", "verify", "draft"} {
		counts, ok := steps[kind].(map[string]any)
		if !ok {
			t.Errorf("internal_states.cuda_graph_steps has no %s steps: %v", kind, steps)
			continue
		}
		for path, field := range map[string]string{"replayed": "replays", "captured": "captures", "eager": "eager"} {
			n, ok := counts[field].(float64)
			series := fmt.Sprintf(`gosling:cuda_graph_steps_total{model_name="%s",path="%s",step="%s"} %g`+"\n", info["served_model_name"], path, kind, n)
			if !ok || !strings.Contains(string(body), series) {
				t.Errorf("%s steps %s: get_server_info says %v, /metrics has no %q", kind, path, counts[field], series)
			}
		}
	}
}
