package attention

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// PageSizes says which page sizes a backend reads natively.
type PageSizes struct {
	Any  bool  // every positive page size
	Only []int // otherwise, exactly these
}

// Allows reports whether page size p is native.
func (p PageSizes) Allows(size int) bool { return p.Any || slices.Contains(p.Only, size) }

func (p PageSizes) String() string {
	if p.Any {
		return "any"
	}
	parts := make([]string, len(p.Only))
	for i, s := range p.Only {
		parts[i] = fmt.Sprint(s)
	}
	return strings.Join(parts, ",")
}

// Caps is what a backend supports, as data: Resolve and the `backends`
// command read it; the conformance tests prove each true field.
type Caps struct {
	Devices       []string // "cpu", "cuda"
	PageSizes     PageSizes
	HeadDims      []int          // nil: any
	KVDTypes      []tensor.DType // storage dtypes of the KV pool
	SlidingWindow bool
	LogitSoftcap  bool
	Sinks         bool // attention sinks: a learned per-head logit in the softmax denominator (Layer.Sinks)
	SpecDecoding  bool // custom (tree) masks for target verification
	MLA           bool
	Multimodal    bool // bidirectional spans, encoder attention
	CUDAGraph     bool
}

// CPUCaps is what every CPU backend supports: every column of the matrix.
// The conformance suite (attention/conformance) proves each field for each
// backend that claims it.
var CPUCaps = Caps{
	Devices:       []string{"cpu"},
	PageSizes:     PageSizes{Any: true},
	KVDTypes:      []tensor.DType{tensor.F32, tensor.BF16, tensor.FP8E4M3},
	SlidingWindow: true,
	LogitSoftcap:  true,
	Sinks:         true,
	SpecDecoding:  true,
	MLA:           true,
	Multimodal:    true,
}

// Options are what a backend constructor receives.
type Options struct {
	Device string
	KV     *kvcache.Cache
	// Layers describes every attention layer of the model (heads, dims,
	// windows), so Plan can size per-forward buffers before layer 0.
	Layers []Layer
	// Runtime is the device the model runs on (cpu.Runtime on the host).
	// CPU backends split their work over its Workers (none: serially); a
	// CUDA backend takes the runtime it launches on from it through the
	// gpu.Provider capability (device/cudadev serves it).
	Runtime device.Runtime
	// Output allocates a CPU backend's layer output, uninitialised, in the
	// forward's recycled memory (cpu.Ops.NewActivation: valid until the
	// next forward); nil: fresh heap memory (tensor.New). Fresh memory for
	// every layer's output is not in cache: writing it costs a decode step
	// of a batch of 32 on stories110M about a millisecond of store misses.
	Output func(shape ...int) tensor.T
}

// Workers is the host pool of the runtime, nil without one.
func (o Options) Workers() device.Workers {
	if o.Runtime == nil {
		return nil
	}
	return o.Runtime.Workers()
}

// NewOutput is a zeroed [rows, cols] layer output of a CPU backend from
// o.Output, or from the heap when it is nil. An Output that hands out
// device memory is a wiring bug (engine sets it for host runtimes only).
func (o Options) NewOutput(rows, cols int) tensor.Host {
	if o.Output == nil {
		return tensor.NewHost(rows, cols)
	}
	h, err := o.Output(rows, cols).Host()
	if err != nil {
		panic("attention.Options.Output: " + err.Error())
	}
	clear(h.Data)
	return h
}

// Entry is one registered backend.
type Entry struct {
	Name        string
	Description string
	Caps        Caps
	New         func(opts Options) (Backend, error)
	// Available says why the backend cannot be offered in this process
	// (a library backend whose library does not load), nil when it can;
	// a nil func: always offered. Resolve and `gosling backends` ask it.
	Available func() error
}

// Unavailable is why e is not offered here, nil when it is.
func (e Entry) Unavailable() error {
	if e.Available == nil {
		return nil
	}
	return e.Available()
}

// Need is what a model and the run settings ask of a backend.
type Need struct {
	Device        string
	PageSize      int
	HeadDims      []int
	SlidingWindow bool
	LogitSoftcap  bool
	Sinks         bool
	MLA           bool
	SpecDecoding  bool // target verification of draft trees (custom masks)
	Multimodal    bool // a vision model: its image tokens attend to each other (bidirectional spans)
}

// Unmet lists the needs a backend cannot serve, as user-facing reasons;
// empty when it can serve them all.
func (c Caps) Unmet(n Need) []string {
	var why []string
	if !slices.Contains(c.Devices, n.Device) {
		why = append(why, fmt.Sprintf("does not run on %s (devices: %s)", n.Device, strings.Join(c.Devices, ", ")))
	}
	if n.PageSize > 0 && !c.PageSizes.Allows(n.PageSize) {
		why = append(why, fmt.Sprintf("does not support page size %d (supported: %v)", n.PageSize, c.PageSizes))
	}
	if c.HeadDims != nil {
		for _, d := range n.HeadDims {
			if !slices.Contains(c.HeadDims, d) {
				why = append(why, fmt.Sprintf("does not support head dim %d (supported: %v)", d, c.HeadDims))
			}
		}
	}
	if n.SlidingWindow && !c.SlidingWindow {
		why = append(why, "does not support sliding-window attention")
	}
	if n.LogitSoftcap && !c.LogitSoftcap {
		why = append(why, "does not support attention logit softcapping")
	}
	if n.Sinks && !c.Sinks {
		why = append(why, "does not support attention sinks (the \"attention sinks\" column of `gosling backends`)")
	}
	if n.SpecDecoding && !c.SpecDecoding {
		why = append(why, "does not support speculative decoding (tree masks)")
	}
	if n.MLA && !c.MLA {
		why = append(why, "does not support MLA")
	}
	if n.Multimodal && !c.Multimodal {
		why = append(why, "does not support a vision model's bidirectional image spans (the \"multimodal\" column of `gosling backends`)")
	}
	return why
}
