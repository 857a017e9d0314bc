package cpu

import (
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/kvcache"
)

// Runtime is the host as a device.Runtime: the model's kernels on a worker
// pool, the KV cache in host memory, work on the caller's goroutine.
type Runtime struct{ ops *Ops }

var _ device.Runtime = (*Runtime)(nil)

// NewRuntime runs on w, which stays the caller's to close.
func NewRuntime(w *Workers) *Runtime { return &Runtime{ops: NewOps(w)} }

// Workers is the pool the Ops run on (nil when they run serially).
func (r *Runtime) Workers() device.Workers {
	if r.ops.Workers == nil {
		return nil
	}
	return r.ops.Workers
}

func (*Runtime) Name() string                   { return "cpu" }
func (r *Runtime) Ops() device.Ops              { return r.ops }
func (*Runtime) KVMemory() kvcache.DeviceMemory { return nil }
func (*Runtime) Run(fn func() error) error      { return fn() }

// Close frees the packed weights (outside the Go heap); the model built on
// this runtime's Ops must not run after.
func (r *Runtime) Close() error { return r.ops.Close() }
