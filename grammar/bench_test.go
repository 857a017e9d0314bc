package grammar

import (
	"slices"
	"testing"
	"time"
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
