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
		e.log.Info("KV cache layout", "bytes_per_token", spec.BytesPerToken(), "tokens", e.cfg.KVCacheTokens,
			"max_forward_tokens", e.forwardTokens, "activation_reserve_bytes", e.activationReserve)
		return
	}
	windowed := spec.NumLayers - spec.FullLayers()
	e.log.Info("KV cache layout", "full_layers", spec.FullLayers(), "full_bytes_per_token", spec.FullLayers()*spec.LayerBytesPerToken(),
		"windowed_layers", windowed, "window", spec.MaxWindow(), "window_region_tokens", spec.SWATokens,
		"window_region_bytes", spec.SWATokens*windowed*spec.LayerBytesPerToken(),
		"max_forward_tokens", e.forwardTokens, "activation_reserve_bytes", e.activationReserve)
}
