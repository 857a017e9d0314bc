package grammar

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

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
// GOSLING_MASKBENCH=full) and feeds each
// instance byte by byte: no invalid instance may be accepted, and valid
// ones may be rejected only for the documented strictness (property
// order and the like) in at most 0.5% of the compiled schemas.
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
	if float64(total.compiled) < 0.75*float64(total.schemas) {
		t.Errorf("compiled %d of %d schemas, below 75%%", total.compiled, total.schemas)
	}
	if float64(total.wrong) > 0.02*float64(total.compiled) {
		t.Errorf("%d compiled schemas reject valid instances (more than 2%%)", total.wrong)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// TestMaskbenchTokens feeds MaskBench instances token by token (llama3
// tokenizer, as MaskBench counts them) through the masks: each token must
// be allowed by the mask before it for valid instances, and invalid ones
// must be refused somewhere. It reports mask-time percentiles per token
// (cold splits included: the first request with a schema pays them) and
// compile times. Slow (minutes): run with GOSLING_MASKBENCH=tokens, and
// GOSLING_MASKBENCH_EVERY=N to take every Nth schema (default 8).
func TestMaskbenchTokens(t *testing.T) {
	if os.Getenv("GOSLING_MASKBENCH") != "tokens" {
		t.Skip("set GOSLING_MASKBENCH=tokens to run the token-level MaskBench check")
	}
	tok, v := loadVocab(t, "llama3")
	cases := loadMaskbench(t)
	every := 8
	if s := os.Getenv("GOSLING_MASKBENCH_EVERY"); s != "" {
		fmt.Sscanf(s, "%d", &every)
	}
	var maskTimes, compileTimes []time.Duration
	mask := make([]uint64, v.MaskWords())
	var schemas, compiled, validRejected, invalidAccepted, valid, invalid, wrongSchemas int
	for i := 0; i < len(cases); i += every {
		c := cases[i]
		schemas++
		start := time.Now()
		g, err := JSONSchema(c.Schema, JSONOptions{})
		if err != nil {
			continue
		}
		comp := Compile(g, v)
		compileTimes = append(compileTimes, time.Since(start))
		compiled++
		schemaStart := time.Now()
		wrong := false
		for _, tc := range c.Tests {
			text := instanceTexts(t, tc.Data)[0]
			ids := tok.Encode(text, false)
			m := comp.NewMatcher()
			ok := true
			for _, id := range ids {
				st := time.Now()
				m.FillMask(mask)
				maskTimes = append(maskTimes, time.Since(st))
				if !MaskAllows(mask, id) {
					ok = false
					break
				}
				if !m.AcceptToken(id) {
					t.Fatalf("%s: mask allowed token %d the matcher refuses", c.File, id)
				}
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
				t.Errorf("invalid instance accepted: %s: %.200s", c.File, text)
			}
		}
		if wrong {
			wrongSchemas++
		}
		if d := time.Since(schemaStart); d > 5*time.Second {
			t.Logf("slow: %s %v", c.File, d)
		}
	}
	slices.Sort(maskTimes)
	slices.Sort(compileTimes)
	pct := func(d []time.Duration, p float64) time.Duration { return d[min(len(d)-1, int(float64(len(d))*p))] }
	t.Logf("schemas %d compiled %d wrong %d (valid rejected %d/%d, invalid accepted %d/%d)",
		schemas, compiled, wrongSchemas, validRejected, valid, invalidAccepted, invalid)
	t.Logf("mask per token (%d masks): p50 %v p95 %v p99 %v max %v", len(maskTimes),
		pct(maskTimes, .5), pct(maskTimes, .95), pct(maskTimes, .99), maskTimes[len(maskTimes)-1])
	t.Logf("compile: p50 %v p95 %v", pct(compileTimes, .5), pct(compileTimes, .95))
	if invalidAccepted > 0 {
		t.Errorf("%d invalid instances accepted", invalidAccepted)
	}
}
