// Package splitkv is the flash-decoding backend, shaped like SGLang's
// Triton backend: each request's keys are cut into chunks; a chunk gives,
// for every query head, a partial output and the log-sum-exp of its
// scores; a merge combines the chunks through their log-sum-exps. In
// Decode the chunks cut the whole sequence, so one long request still
// keeps every worker busy; in Extend the cached prefix is one or more
// chunks and the new tokens (causal, masks, spans) another. On the CPU it
// is the attention core (attention/cpuattn) with the SplitPrefix policy;
// the CUDA entry is in cuda.go.
package splitkv

import (
	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/cpuattn"
)

// Entry registers the CPU backend.
var Entry = attention.Entry{
	Name:        "splitkv",
	Description: "flash-decoding: KV split into chunks over the workers, partials merged by log-sum-exp; token-indexed KV",
	Caps:        attention.CPUCaps,
	New: func(opts attention.Options) (attention.Backend, error) {
		return cpuattn.New("splitkv", opts, cpuattn.SplitPrefix), nil
	},
}
