package engine

import (
	"strings"
	"testing"
)

// TestKVBudget: the fraction holds the weights and the KV pool, the rest
// of the card is the activations' headroom, and the KV pool gives up
// what the activations' reserve needs beyond it.
func TestKVBudget(t *testing.T) {
	const gb = int64(1) << 30
	for _, tc := range []struct {
		name                  string
		total, free           int64
		frac                  float64
		reserve               int64
		wantBudget, wantShort int64
	}{
		{"the reserve fits the headroom", 80 * gb, 20 * gb, 0.75, 10 * gb, 0, 0},
		{"the reserve takes from the pool", 80 * gb, 20 * gb, 0.9, 12 * gb, 72*gb - 60*gb - 4*gb, 4 * gb},
		{"no reserve: the fraction less what is used", 80 * gb, 30 * gb, 0.85, 0, 68*gb - 50*gb, 0},
		{"a fraction of 1 leaves no headroom", 80 * gb, 30 * gb, 1, 3 * gb, 80*gb - 50*gb - 3*gb, 3 * gb},
		{"nothing left", 80 * gb, 5 * gb, 0.9, 10 * gb, 72*gb - 75*gb - 2*gb, 2 * gb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget, short := kvBudget(tc.total, tc.free, tc.frac, tc.reserve)
			if budget != tc.wantBudget || short != tc.wantShort {
				t.Errorf("budget %d, shortfall %d; want %d, %d", budget, short, tc.wantBudget, tc.wantShort)
			}
		})
	}
}

// TestForwardCaps: the largest forward is a prefill budget's worth (a
// chunk, or a whole context without chunking) and never less than every
// running request's decode or tree; its logits rows are the decodes'
// and at least minLogitRows; a cap set by hand must leave a prefill room.
func TestForwardCaps(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		cfg                  Config
		tree, set            int
		wantTokens, wantRows int
		wantErr              string
	}{
		{name: "defaults", cfg: Config{MaxRunningRequests: 64, MaxPrefillTokens: 4096, ChunkedPrefillSize: 2048, ContextLength: 2304},
			tree: 1, wantTokens: 4096, wantRows: 256},
		{name: "a chunk larger than the budget", cfg: Config{MaxRunningRequests: 8, MaxPrefillTokens: 1024, ChunkedPrefillSize: 8192, ContextLength: 32768},
			tree: 1, wantTokens: 8192, wantRows: 256},
		{name: "no chunking: a whole context", cfg: Config{MaxRunningRequests: 8, MaxPrefillTokens: 1024, ChunkedPrefillSize: -1, ContextLength: 32768},
			tree: 1, wantTokens: 32768, wantRows: 256},
		{name: "decodes beyond the budget", cfg: Config{MaxRunningRequests: 512, MaxPrefillTokens: 256, ChunkedPrefillSize: 256, ContextLength: 4096},
			tree: 1, wantTokens: 512, wantRows: 512},
		{name: "verified trees", cfg: Config{MaxRunningRequests: 64, MaxPrefillTokens: 256, ChunkedPrefillSize: 256, ContextLength: 4096},
			tree: 8, wantTokens: 512, wantRows: 512},
		{name: "a cap by hand", cfg: Config{MaxRunningRequests: 4, MaxPrefillTokens: 4096, ChunkedPrefillSize: 2048, ContextLength: 4096},
			tree: 1, set: 100, wantTokens: 100, wantRows: 100},
		{name: "a cap by hand that decodes fill", cfg: Config{MaxRunningRequests: 64, MaxPrefillTokens: 4096, ChunkedPrefillSize: 2048, ContextLength: 4096},
			tree: 1, set: 64, wantErr: "lower --max-running-requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, rows, err := forwardCaps(&tc.cfg, tc.tree, tc.set)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || tokens != tc.wantTokens || rows != tc.wantRows {
				t.Errorf("caps %d tokens, %d rows (%v); want %d, %d", tokens, rows, err, tc.wantTokens, tc.wantRows)
			}
		})
	}
}
