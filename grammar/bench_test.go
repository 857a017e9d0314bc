package grammar

import (
	"encoding/json"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/cputime"
)

// BenchmarkMask times FillMask per token with qwen3's 151,669-token
// vocabulary, walking a JSON instance token by token. "cold" builds a
// fresh Compiled each iteration, so every position's vocabulary split is
// computed (the first request with a schema); "warm" reuses it (every
// later request). p50/p99 are per-token mask times.
func BenchmarkMask(b *testing.B) {
	tok, v := loadVocab(b, "qwen3")
	cases := []struct{ name, schema, text string }{
		{"schema", `{"type":"object","properties":{"location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
			"days":{"type":"integer","minimum":1,"maximum":14},"details":{"type":"array","items":{"type":"string"}}},
			"required":["location","unit"],"additionalProperties":false}`,
			`{"location": "San Francisco, CA", "unit": "celsius", "days": 7, "details": ["humidity", "wind speed", "UV index"]}`},
		{"json_object", "", `{"name": "Ada Lovelace", "born": 1815, "fields": ["mathematics", "computing"], "notes": {"engine": "analytical", "first_program": true}}`},
	}
	for _, tc := range cases {
		var g *Grammar
		var err error
		if tc.schema == "" {
			g = JSONObject(JSONOptions{})
		} else if g, err = JSONSchema([]byte(tc.schema), JSONOptions{}); err != nil {
			b.Fatal(err)
		}
		ids := tok.Encode(tc.text, false)
		mask := make([]uint64, v.MaskWords())
		for _, mode := range []string{"cold", "warm"} {
			b.Run(tc.name+"/"+mode, func(b *testing.B) {
				shared := Compile(g, v)
				if mode == "warm" {
					m := shared.NewMatcher()
					for _, id := range ids {
						m.FillMask(mask)
						m.AcceptToken(id)
					}
				}
				var times []time.Duration
				for b.Loop() {
					c := shared
					if mode == "cold" {
						c = Compile(g, v)
					}
					m := c.NewMatcher()
					for _, id := range ids {
						start := time.Now()
						m.FillMask(mask)
						times = append(times, time.Since(start))
						if !MaskAllows(mask, id) || !m.AcceptToken(id) {
							b.Fatalf("token %d refused", id)
						}
					}
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50_µs/mask")
				b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99_µs/mask")
				b.ReportMetric(float64(len(ids)), "tokens")
			})
		}
	}
}

// patternCases are patterns common in MaskBench's schemas, each with an
// instance.
var patternCases = []struct{ name, pattern, text string }{
	{"hex24", `^[A-Fa-f\d]{24}$`, `"5f2b8c9e1a3d4e6f7a8b9c0d"`},
	{"uuid", `^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, `"123e4567-e89b-42d3-a456-426614174000"`},
	{"path", `^/(([a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})+(/([a-zA-Z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})*)*)?$`, `"/api/v1/users%20list/42"`},
	{"date", `^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[0-1])$`, `"2024-02-29"`},
	{"words", `^(?:\S+\s+){0,29}\S+$`, `"the quick brown fox jumps"`},
	{"url", `^(https?:\/\/)?([\da-z\.-]+)\.([a-z\.]{2,6})([\/\w \.-]*)*\/?$`, `"https://example.com/docs/index.html"`},
	{"ipv4cidr", `^([0-9]{1,3}\.){3}[0-9]{1,3}(/([0-9]|[1-2][0-9]|3[0-2]))?$`, `"192.168.10.0/24"`},
	{"ident", `^[0-9a-zA-Z_-]{1,255}$`, `"my_resource-name_01"`},
}

// BenchmarkPatternMask times the masks inside a patterned string (a JSON
// string with "pattern") the first time the pattern is seen, with llama3's
// vocabulary: each iteration drops the vocabulary's shared splits and
// class slices and compiles afresh, so every position is split anew, as
// for the first request whose schema has that pattern. It reports, per pattern, the
// slowest mask (first_max_µs: the string's first positions are its
// costliest), the sum over the instance (total_µs) and the median mask, in
// the thread's CPU time, and the time to compile and warm the start.
//
//	go test ./grammar -run '^$' -bench PatternMask -benchtime 5x
func BenchmarkPatternMask(b *testing.B) {
	tok, v := loadVocab(b, "llama3")
	mask := make([]uint64, v.MaskWords())
	for _, pc := range patternCases {
		b.Run(pc.name, func(b *testing.B) {
			runtime.LockOSThread() // thread CPU time reads this goroutine's
			defer runtime.UnlockOSThread()
			schema, _ := json.Marshal(map[string]any{"type": "string", "pattern": pc.pattern})
			g, err := JSONSchema(schema, JSONOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ids := tok.Encode(pc.text, false)
			var maxes, totals, all, compiles []time.Duration
			for b.Loop() {
				v.splitMu.Lock()
				v.splits, v.oldSplits = nil, nil
				v.splitMu.Unlock()
				v.classMu.Lock()
				v.classes = nil
				v.classMu.Unlock()
				start := cputime.Thread()
				c := Compile(g, v)
				c.Warm()
				compiles = append(compiles, cputime.Thread()-start)
				m := c.NewMatcher()
				var worst, total time.Duration
				for _, id := range ids {
					st := cputime.Thread()
					m.FillMask(mask)
					d := cputime.Thread() - st
					all = append(all, d)
					worst, total = max(worst, d), total+d
					if !MaskAllows(mask, id) || !m.AcceptToken(id) {
						b.Fatalf("token %d refused", id)
					}
				}
				if !m.CanEnd() {
					b.Fatal("the instance is not complete")
				}
				maxes, totals = append(maxes, worst), append(totals, total)
			}
			slices.Sort(maxes)
			slices.Sort(totals)
			slices.Sort(all)
			slices.Sort(compiles)
			b.ReportMetric(float64(pct(maxes, .5).Microseconds()), "first_max_µs")
			b.ReportMetric(float64(pct(totals, .5).Microseconds()), "total_µs")
			b.ReportMetric(float64(pct(all, .5).Microseconds()), "p50_µs/mask")
			b.ReportMetric(ms(pct(compiles, .5)), "compile_warm_ms")
			b.ReportMetric(float64(len(ids)), "tokens")
		})
	}
	if load, ok := cputime.LoadAverage(); ok {
		b.Logf("load average %.2f", load)
	}
}
