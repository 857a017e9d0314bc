package grammar

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/cputime"
	"github.com/gosling-ai/gosling/internal/shared"
)

// maskbenchPath is JSONSchemaBench/MaskBench's public split in ../shared:
// real schemas with instances marked valid or invalid.
const maskbenchPath = "structured/maskbench_public.jsonl.gz"

type maskbenchCase struct {
	Category string          `json:"category"`
	File     string          `json:"_file"`
	Schema   json.RawMessage `json:"schema"`
	Tests    []struct {
		Valid bool            `json:"valid"`
		Data  json.RawMessage `json:"data"`
	} `json:"tests"`
}

func loadMaskbench(t testing.TB) []maskbenchCase {
	f, err := os.Open(shared.Path(t, maskbenchPath))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []maskbenchCase
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var c maskbenchCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// instanceTexts are the texts of one instance the grammar must treat
// alike: compact, Python's default separators, and indented.
func instanceTexts(t testing.TB, data json.RawMessage) []string {
	v, err := parseOrdered(data)
	if err != nil {
		t.Fatal(err)
	}
	compact := marshalCompact(v)
	var indented []byte
	indented, err = indentOrdered(compact)
	if err != nil {
		t.Fatal(err)
	}
	return []string{compact, string(indented)}
}

func indentOrdered(compact string) ([]byte, error) {
	var buf bytes.Buffer
	err := json.Indent(&buf, []byte(compact), "", "  ")
	return buf.Bytes(), err
}

type benchTally struct {
	schemas, compiled, refused, wrong int
	validRejected, invalidAccepted    int
	valid, invalid                    int
}

// TestMaskbenchBytes compiles MaskBench schemas (all of them with
// GOSLING_MASKBENCH=full) and feeds each instance byte by byte: at least
// 85% of the schemas compile, no invalid instance is accepted, and valid
// ones are rejected (for the documented strictness) in at most 0.5% of
// the compiled schemas. With -v it prints
// the figures per category and the keywords refused.
func TestMaskbenchBytes(t *testing.T) {
	cases := loadMaskbench(t)
	if os.Getenv("GOSLING_MASKBENCH") != "full" {
		// Compiling all 2,837 schemas takes minutes on CI's two cores;
		// every 16th keeps each category and the thresholds meaningful.
		var sample []maskbenchCase
		for i := 0; i < len(cases); i += 16 {
			sample = append(sample, cases[i])
		}
		cases = sample
	}
	tallies := map[string]*benchTally{}
	refusedBy := map[string]int{}
	var compileTimes []time.Duration
	total := &benchTally{}
	for _, c := range cases {
		tl := tallies[c.Category]
		if tl == nil {
			tl = &benchTally{}
			tallies[c.Category] = tl
		}
		tl.schemas++
		start := time.Now()
		g, err := JSONSchema(c.Schema, JSONOptions{})
		compileTimes = append(compileTimes, time.Since(start))
		if err != nil {
			tl.refused++
			var ue *UnsupportedError
			if errors.As(err, &ue) {
				refusedBy[ue.Keyword]++
			} else {
				refusedBy["(invalid schema) "+err.Error()]++
			}
			continue
		}
		tl.compiled++
		comp := Compile(g, nil)
		wrong := false
		for _, tc := range c.Tests {
			for _, text := range instanceTexts(t, tc.Data) {
				m := comp.NewMatcher()
				ok := m.AcceptBytes([]byte(text)) && m.CanEnd()
				if tc.Valid {
					tl.valid++
				} else {
					tl.invalid++
				}
				switch {
				case tc.Valid && !ok:
					tl.validRejected++
					wrong = true
					if testing.Verbose() {
						t.Logf("valid rejected: %s %s: %.200s", c.Category, c.File, text)
					}
				case !tc.Valid && ok:
					tl.invalidAccepted++
					wrong = true
					t.Errorf("invalid instance accepted: %s %s: %.300s", c.Category, c.File, text)
				}
			}
		}
		if wrong {
			tl.wrong++
		}
	}
	var cats []string
	for k := range tallies {
		cats = append(cats, k)
	}
	sort.Strings(cats)
	for _, k := range cats {
		tl := tallies[k]
		t.Logf("%-16s schemas %4d compiled %4d refused %4d wrong %3d (valid rejected %d/%d, invalid accepted %d/%d)",
			k, tl.schemas, tl.compiled, tl.refused, tl.wrong, tl.validRejected, tl.valid, tl.invalidAccepted, tl.invalid)
		total.schemas += tl.schemas
		total.compiled += tl.compiled
		total.refused += tl.refused
		total.wrong += tl.wrong
		total.validRejected += tl.validRejected
		total.invalidAccepted += tl.invalidAccepted
		total.valid += tl.valid
		total.invalid += tl.invalid
	}
	t.Logf("%-16s schemas %4d compiled %4d (%.1f%%) refused %4d wrong %3d (valid rejected %d/%d, invalid accepted %d/%d)",
		"TOTAL", total.schemas, total.compiled, 100*float64(total.compiled)/float64(total.schemas), total.refused, total.wrong,
		total.validRejected, total.valid, total.invalidAccepted, total.invalid)
	type kv struct {
		k string
		n int
	}
	var refused []kv
	for k, n := range refusedBy {
		refused = append(refused, kv{k, n})
	}
	slices.SortFunc(refused, func(a, b kv) int { return b.n - a.n })
	for i, r := range refused {
		if i >= 25 {
			break
		}
		t.Logf("refused %4d: %s", r.n, truncate(r.k, 120))
	}
	slices.Sort(compileTimes)
	t.Logf("compile (grammar only) p50 %v p95 %v p99 %v", compileTimes[len(compileTimes)/2],
		compileTimes[len(compileTimes)*95/100], compileTimes[len(compileTimes)*99/100])
	if total.invalidAccepted > 0 {
		t.Errorf("%d invalid instances accepted", total.invalidAccepted)
	}
	if float64(total.compiled) < 0.85*float64(total.schemas) {
		t.Errorf("compiled %d of %d schemas, below 85%%", total.compiled, total.schemas)
	}
	if float64(total.wrong) > 0.005*float64(total.compiled) {
		t.Errorf("%d compiled schemas reject valid instances (more than 0.5%%)", total.wrong)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// BenchmarkMaskbenchCompile compiles every MaskBench schema the grammar
// engine accepts (the grammar, vocabulary-independent) and reports the
// compile-time percentiles over them, with the share compiled: wall time,
// and the process's CPU time (cpu_*), which other processes on a shared
// machine disturb less.
//
//	go test ./grammar -run '^$' -bench MaskbenchCompile -benchtime 1x
func BenchmarkMaskbenchCompile(b *testing.B) {
	cases := loadMaskbench(b)
	var times, cpu []time.Duration
	compiled := 0
	for b.Loop() {
		times, cpu, compiled = times[:0], cpu[:0], 0
		for _, c := range cases {
			start, startCPU := time.Now(), cputime.Process()
			_, err := JSONSchema(c.Schema, JSONOptions{})
			d, dc := time.Since(start), cputime.Process()-startCPU
			if err == nil {
				compiled++
				times = append(times, d)
				cpu = append(cpu, dc)
			}
		}
	}
	slices.Sort(times)
	slices.Sort(cpu)
	b.ReportMetric(100*float64(compiled)/float64(len(cases)), "%compiled")
	b.ReportMetric(ms(pct(times, .5)), "p50_ms")
	b.ReportMetric(ms(pct(times, .95)), "p95_ms")
	b.ReportMetric(ms(pct(times, .99)), "p99_ms")
	b.ReportMetric(ms(pct(cpu, .5)), "cpu_p50_ms")
	b.ReportMetric(ms(pct(cpu, .95)), "cpu_p95_ms")
	b.ReportMetric(ms(pct(cpu, .99)), "cpu_p99_ms")
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkMaskbenchTokens feeds MaskBench instances token by token (llama3
// tokenizer, as MaskBench counts them) through the masks of every Nth
// schema (GOSLING_MASKBENCH_EVERY, default 8): each token of a valid
// instance must be allowed by the mask before it, and every invalid one
// must be refused somewhere. It reports per-token mask times, cold (the
// first request with a schema computes the vocabulary split of each
// position that neither this grammar nor, for shared rules, an earlier
// one with the same tokenizer has split) and warm (a second pass over the
// same instances, every split cached), in wall and thread CPU time (_cpu),
// and the time to compile and split the start position (Compiled.Warm, as
// the server does before the first step), in wall and thread CPU time,
// and the machine's load average at the end (load_avg).
//
//	go test ./grammar -run '^$' -bench MaskbenchTokens -benchtime 1x
func BenchmarkMaskbenchTokens(b *testing.B) {
	tok, v := loadVocab(b, "llama3")
	cases := loadMaskbench(b)
	every := 8
	if s := os.Getenv("GOSLING_MASKBENCH_EVERY"); s != "" {
		fmt.Sscanf(s, "%d", &every)
	}
	var cold, warm, compileTimes, compileCPU []time.Duration
	// coldCPU, warmCPU: the same masks in the thread's CPU time, which
	// other processes on a loaded machine do not inflate.
	var coldCPU, warmCPU []time.Duration
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := make([]uint64, v.MaskWords())
	var schemas, compiled, validRejected, invalidAccepted, valid, invalid, wrongSchemas int
	for b.Loop() {
		cold, warm, compileTimes, compileCPU = cold[:0], warm[:0], compileTimes[:0], compileCPU[:0]
		coldCPU, warmCPU = coldCPU[:0], warmCPU[:0]
		schemas, compiled, validRejected, invalidAccepted, valid, invalid, wrongSchemas = 0, 0, 0, 0, 0, 0, 0
		for i := 0; i < len(cases); i += every {
			c := cases[i]
			schemas++
			start, startCPU := time.Now(), cputime.Thread()
			g, err := JSONSchema(c.Schema, JSONOptions{})
			if err != nil {
				continue
			}
			comp := Compile(g, v)
			comp.Warm()
			compileTimes = append(compileTimes, time.Since(start))
			compileCPU = append(compileCPU, cputime.Thread()-startCPU)
			compiled++
			wrong := false
			for pass, times := range [][]time.Duration{cold, warm} {
				cpu := &coldCPU
				if pass > 0 {
					cpu = &warmCPU
				}
				for _, tc := range c.Tests {
					text := instanceTexts(b, tc.Data)[0]
					ids := tok.Encode(text, false)
					m := comp.NewMatcher()
					ok := true
					for _, id := range ids {
						st, stCPU := time.Now(), cputime.Thread()
						m.FillMask(mask)
						times = append(times, time.Since(st))
						*cpu = append(*cpu, cputime.Thread()-stCPU)
						if !MaskAllows(mask, id) {
							ok = false
							break
						}
						if !m.AcceptToken(id) {
							b.Fatalf("%s: mask allowed token %d the matcher refuses", c.File, id)
						}
					}
					if pass > 0 {
						continue
					}
					ok = ok && m.CanEnd()
					if tc.Valid {
						valid++
					} else {
						invalid++
					}
					if tc.Valid && !ok {
						validRejected++
						wrong = true
					}
					if !tc.Valid && ok {
						invalidAccepted++
						wrong = true
						b.Errorf("invalid instance accepted: %s: %.200s", c.File, text)
					}
				}
				if pass == 0 {
					cold = times
				} else {
					warm = times
				}
			}
			if wrong {
				wrongSchemas++
			}
		}
	}
	slices.Sort(cold)
	slices.Sort(warm)
	slices.Sort(coldCPU)
	slices.Sort(warmCPU)
	slices.Sort(compileTimes)
	slices.Sort(compileCPU)
	b.Logf("schemas %d compiled %d wrong %d (valid rejected %d/%d, invalid accepted %d/%d), %d masks",
		schemas, compiled, wrongSchemas, validRejected, valid, invalidAccepted, invalid, len(cold))
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"cold", cold}, {"warm", warm}, {"cold_cpu", coldCPU}, {"warm_cpu", warmCPU}} {
		b.ReportMetric(float64(pct(m.d, .5).Microseconds()), m.name+"_p50_µs")
		b.ReportMetric(float64(pct(m.d, .95).Microseconds()), m.name+"_p95_µs")
		b.ReportMetric(float64(pct(m.d, .99).Microseconds()), m.name+"_p99_µs")
	}
	b.ReportMetric(ms(pct(compileTimes, .5)), "compile_warm_p50_ms")
	b.ReportMetric(ms(pct(compileTimes, .95)), "compile_warm_p95_ms")
	b.ReportMetric(ms(pct(compileCPU, .5)), "compile_warm_cpu_p50_ms")
	b.ReportMetric(ms(pct(compileCPU, .95)), "compile_warm_cpu_p95_ms")
	if load, ok := cputime.LoadAverage(); ok {
		b.ReportMetric(load, "load_avg")
	}
	if invalidAccepted > 0 {
		b.Errorf("%d invalid instances accepted", invalidAccepted)
	}
}
