package engine

import (
	"github.com/gosling-ai/gosling/kvcache"
)

// planWindowRegion sizes the sliding-window KV region: every running
// request needs its window, plus the chunk it is prefilling, plus a page
// of slack at each end.
func (e *Engine) planWindowRegion(spec *kvcache.Spec) {
	spec.LayerWindows = nil
	window := 0
	for _, l := range e.model.AttentionLayers() {
		spec.LayerWindows = append(spec.LayerWindows, l.SlidingWindow)
		window = max(window, l.SlidingWindow)
	}
	if window == 0 {
		spec.LayerWindows = nil
		return
	}
	chunk := e.cfg.ChunkedPrefillSize
	if chunk <= 0 {
		chunk = e.cfg.ContextLength
	}
	chunk = min(chunk, e.cfg.MaxPrefillTokens)
	spec.SWATokens = e.cfg.MaxRunningRequests * (window + chunk + 2*max(e.cfg.PageSize, 1))
}

func (e *Engine) logKVLayout(spec kvcache.Spec) {
	if e.kv.SWA == nil {
		e.log.Info("KV cache layout", "bytes_per_token", spec.BytesPerToken(), "tokens", e.cfg.KVCacheTokens)
		return
	}
	windowed := spec.NumLayers - spec.FullLayers()
	e.log.Info("KV cache layout", "full_layers", spec.FullLayers(), "full_bytes_per_token", spec.FullLayers()*spec.LayerBytesPerToken(),
		"windowed_layers", windowed, "window", spec.MaxWindow(), "window_region_tokens", spec.SWATokens,
		"window_region_bytes", spec.SWATokens*windowed*spec.LayerBytesPerToken())
}

// prepareWindow readies the window region for computing r's tokens up to
// hi: it frees window pages no windowed layer will read again (queries
// from r.computed on look back at most window-1 tokens) and gives window
// pages to the tokens about to be computed, evicting cached prefixes when
// the region is short. It reports false when it still is.
func (e *Engine) prepareWindow(r *request, hi int) bool {
	if e.kv.SWA == nil {
		return true
	}
	e.kv.SlideSWA(r.seq, r.computed-e.kv.Pool.Spec.MaxWindow()+1)
	if e.kv.PrepareSWA(r.seq, hi) {
		return true
	}
	if e.radix != nil {
		for e.kv.SWAPagesNeeded(r.seq, hi) > e.kv.SWA.NumFree() && e.radix.Evict(1) > 0 {
		}
	}
	return e.kv.PrepareSWA(r.seq, hi)
}
