package gpu

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
)

// TestBuildLayout checks the plan arrays against attention.Visible and the
// request table for a batch with a prefix, a tree mask and a span.
func TestBuildLayout(t *testing.T) {
	for _, ps := range []int{1, 3, 16} {
		cache, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 4, HeadDimV: 4}, ps, 256, 4, 64)
		if err != nil {
			t.Fatal(err)
		}
		b := &forward.Batch{Mode: forward.TargetVerify, KV: cache}
		lens := [][2]int{{5, 3}, {0, 6}}
		for r, l := range lens {
			seq, _ := cache.NewSeq()
			if seq == nil {
				t.Fatal("no row")
			}
			if ok, err := cache.Grow(seq, l[0]+l[1]); !ok || err != nil {
				t.Fatal(ok, err)
			}
			b.ReqRows = append(b.ReqRows, int32(seq.Row))
			b.PrefixLens = append(b.PrefixLens, int32(l[0]))
			b.ExtendLens = append(b.ExtendLens, int32(l[1]))
			for i := l[0]; i < l[0]+l[1]; i++ {
				b.InputIDs = append(b.InputIDs, 0)
				b.Positions = append(b.Positions, int32(i))
				b.OutSlots = append(b.OutSlots, cache.Table.Row(seq.Row)[i])
			}
			if r == 0 { // a tree mask: each draft sees the prefix and the first draft
				b.MaskStarts = append(b.MaskStarts, 0)
				for t := range l[1] {
					for j := range l[0] + l[1] {
						b.CustomMask = append(b.CustomMask, j < l[0] || j == l[0] || j == l[0]+t)
					}
				}
			} else {
				b.MaskStarts = append(b.MaskStarts, -1)
			}
		}
		b.Spans = []forward.Span{{Req: 1, Start: 1, End: 4}}
		if err := b.Finalize(); err != nil {
			t.Fatal(err)
		}
		lay, err := BuildLayout(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		w := lay.Words
		for r := range b.NumReqs() {
			req := w[lay.ReqAt+r*reqFields:]
			if req[reqPrefix] != b.PrefixLens[r] || req[reqExtLen] != b.ExtendLens[r] || req[reqExtStart] != b.ExtendStarts[r] || int(req[reqSeqLen]) != b.SeqLen(r) {
				t.Fatalf("page %d request %d fields %v", ps, r, req[:reqFields])
			}
			slots := b.SeqSlots(r)
			for j, slot := range slots {
				page := w[lay.PagesAt+int(req[reqPageOff])+j/ps]
				if page*int32(ps)+int32(j%ps) != slot {
					t.Fatalf("page %d request %d token %d: page %d does not give slot %d", ps, r, j, page, slot)
				}
			}
			for tk := range int(b.ExtendLens[r]) {
				tok := int(b.ExtendStarts[r]) + tk
				vis := attention.Visible(b, &attention.Layer{}, r, tk)
				if w[lay.TokReqAt+tok] != int32(r) || int(w[lay.TokHiAt+tok]) != vis.Hi || w[lay.OutSlotsAt+tok] != b.OutSlots[tok] {
					t.Fatalf("page %d token %d: req %d hi %d slot %d, want %d %d %d", ps, tok, w[lay.TokReqAt+tok], w[lay.TokHiAt+tok], w[lay.OutSlotsAt+tok], r, vis.Hi, b.OutSlots[tok])
				}
				moff := w[lay.TokMaskAt+tok]
				for j := range vis.Hi {
					want := vis.Sees(j)
					got := moff < 0 || lay.Mask[int(moff)+j] == 1
					if got != want {
						t.Fatalf("page %d token %d key %d: mask %v, want %v", ps, tok, j, got, want)
					}
				}
			}
		}
	}
}

func TestEncodeLayout(t *testing.T) {
	b := &forward.Batch{Mode: forward.Encode, ReqRows: []int32{0, 0}, PrefixLens: []int32{0, 0}, ExtendLens: []int32{2, 3},
		InputIDs: make([]int32, 5), Positions: make([]int32, 5), OutSlots: make([]int32, 5)}
	if err := b.Finalize(); err != nil {
		t.Fatal(err)
	}
	lay, err := BuildLayout(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Keys are the forward's own rows: request 1's start at row 2.
	pages := lay.Words[lay.PagesAt:]
	if lay.PageSize != 1 || pages[0] != 0 || pages[1] != 1 || pages[2] != 2 || pages[4] != 4 {
		t.Fatalf("encode pages %v (page size %d)", pages, lay.PageSize)
	}
	if hi := lay.Words[lay.TokHiAt]; hi != 2 {
		t.Fatalf("encode token 0 sees up to %d, want the whole sequence (2)", hi)
	}
}

func TestChooseSplit(t *testing.T) {
	for _, c := range []struct {
		sms, blocks, seq int
		want             Split
	}{
		{132, 8, 32768, Split{64, 512}}, // batch 1, long context: many chunks
		{132, 8, 60, Split{1, 0}},       // within one key tile: never split
		{132, 6, 160, Split{3, 64}},     // the battery's long decode
		{132, 1024, 4096, Split{1, 0}},  // enough blocks already
		{132, 128, 4096, Split{5, 832}}, // batch 16 at 4K
		{132, 8, 1000, Split{16, 64}},   // chunks of at least one key tile
	} {
		if got := ChooseSplit(c.sms, c.blocks, c.seq); got != c.want {
			t.Errorf("ChooseSplit(%d, %d, %d) = %+v, want %+v", c.sms, c.blocks, c.seq, got, c.want)
		}
	}
}

func TestChooseStreamSplit(t *testing.T) {
	const part = 4 * 128 * 4 // partial output of a group of 4 heads of 128
	for _, c := range []struct {
		sms, blocks, seq, keyBytes int
		want                       Split
	}{
		{132, 8, 32768, 512, Split{16, 2048}},    // one request: a block per SM; more splits lengthen the merge
		{132, 8, 4096, 512, Split{15, 288}},      // shorter: fewer, as the merge weighs more
		{132, 128, 4096, 512, Split{2, 2048}},    // 16 requests: one block per SM would run alone
		{132, 512, 4096, 512, Split{Splits: 1}},  // 64 requests: more splits only add waves
		{132, 512, 32768, 512, Split{Splits: 1}}, // likewise at long context
		{132, 8, 64, 512, Split{Splits: 1}},      // too short to split
		{132, 8, 1024, 512, Split{7, 160}},       // short: the merge outweighs more splits
	} {
		if got := ChooseStreamSplit(c.sms, c.blocks, c.seq, c.keyBytes, part); got != c.want {
			t.Errorf("ChooseStreamSplit(%d, %d, %d, %d) = %+v, want %+v", c.sms, c.blocks, c.seq, c.keyBytes, got, c.want)
		}
	}
}

// ChooseWaveSplit as FillGPU calls it for attn_mla_wg on an H100 (132
// SMs): 128 heads are two blocks a token, 64 one.
func TestChooseWaveSplit(t *testing.T) {
	const keyBytes, fill, part = 2 * mlaDK, 2 * mlaWGKeys * mlaRow, mlaWGHeads * (mlaDV + 1) * 4
	for _, c := range []struct {
		blocks, seq int
		want        Split
	}{
		{128, 4096, Split{Splits: 1}},  // bs64, 128 heads: one wave already; a split adds a wave and the partials
		{128, 32768, Split{Splits: 1}}, // likewise at long context
		{32, 4096, Split{4, 1024}},     // bs16: four splits fill one wave
		{64, 4096, Split{2, 2048}},     // bs64 at 64 heads, or bs32 at 128
		{2, 32768, Split{64, 512}},     // bs1: as many splits as the SMs take
		{2, 64, Split{Splits: 1}},      // too short to split
	} {
		if got := ChooseWaveSplit(132, c.blocks, c.seq, keyBytes, fill, part); got != c.want {
			t.Errorf("ChooseWaveSplit(132, %d, %d) = %+v, want %+v", c.blocks, c.seq, got, c.want)
		}
	}
}

func TestFixedSplit(t *testing.T) {
	for _, c := range []struct {
		seq, n int
		want   Split
	}{
		{256, 1, Split{1, 0}},
		{256, 0, Split{1, 0}},
		{256, 4, Split{4, 64}},
		{256, 3, Split{3, 96}},   // chunks rounded up to 16 keys
		{64, 8, Split{4, 16}},    // no chunk below 16 keys
		{1000, 7, Split{7, 144}}, // the last chunk short
	} {
		if got := FixedSplit(c.seq, c.n); got != c.want {
			t.Errorf("FixedSplit(%d, %d) = %+v, want %+v", c.seq, c.n, got, c.want)
		}
	}
}

// GOSLING_DECODE_SPLITS: a count, 0 or unset for the policy; anything else
// fails the device's opening rather than being ignored.
func TestDecodeSplitsEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{{"", 0, true}, {"0", 0, true}, {"4", 4, true}, {"16", 16, true}, {"-1", 0, false}, {"four", 0, false}, {"2.5", 0, false}} {
		n, err := decodeSplitsEnv(tc.v)
		if (err == nil) != tc.ok || n != tc.want {
			t.Errorf("%q: %d, %v; want %d, ok %v", tc.v, n, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "GOSLING_DECODE_SPLITS") {
			t.Errorf("%q: the error does not name the setting: %v", tc.v, err)
		}
	}
}

// GOSLING_FA3_TMA: 0 or 1 (unset: 1); anything else an error.
func TestNoTMAEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "1": false, "0": true} {
		if got, err := noTMAEnv(v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"off", "no", "2"} {
		if _, err := noTMAEnv(v); err == nil || !strings.Contains(err.Error(), "GOSLING_FA3_TMA") {
			t.Errorf("%q: %v, want an error naming the setting", v, err)
		}
	}
}

// GOSLING_MLA_WG: 0 or 1 (unset: 1); anything else an error naming it.
func TestMLAWGEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "1": false, "0": true} {
		if got, err := offSwitchEnv("GOSLING_MLA_WG", v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"off", "false", "2"} {
		if _, err := offSwitchEnv("GOSLING_MLA_WG", v); err == nil || !strings.Contains(err.Error(), "GOSLING_MLA_WG") {
			t.Errorf("%q: %v, want an error naming the setting", v, err)
		}
	}
}
