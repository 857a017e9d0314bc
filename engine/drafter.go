package engine

import (
	"log/slog"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/device/cpu"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
)

// drafterDevice is where a drafter (a STANDALONE draft model, an EAGLE
// head) runs: on the target's device. On a GPU it shares the target's
// runtime and ops: its forwards go on the target's stream between the
// target's, each bringing what it returns to the host before the next
// forward begins (a forward recycles the one before's memory), and its KV
// lives in device memory. On the CPU it has host ops of its own, closed
// with it.
type drafterDevice struct {
	rt   device.Runtime
	ops  device.Ops
	host *cpu.Ops             // the drafter's own host ops; nil on a GPU
	mem  kvcache.DeviceMemory // nil: host pools
}

// drafterDevice serves a drafter's weights ck in the target's --dtype and
// --quantization on the target's device.
func (e *Engine) drafterDevice(ck *model.Checkpoint) (*drafterDevice, error) {
	c, err := parseWeightDType(e.cfg.DType, e.cfg.Quantization)
	if err != nil {
		return nil, err
	}
	if c != nil {
		if err := c.wrap(ck.Weights); err != nil {
			return nil, err
		}
		ck.Weights = c
	}
	if mem := e.rt.KVMemory(); mem != nil {
		return &drafterDevice{rt: e.rt, ops: e.rt.Ops(), mem: mem}, nil
	}
	convertLazily(ck.Weights)
	ops := cpu.NewOps(e.workers)
	ops.FP8 = c != nil && c.fp8 != nil
	return &drafterDevice{rt: cpu.NewRuntime(e.workers), ops: ops, host: ops}, nil
}

// drafterModel is what both drafters (draftModel, eagleDrafter) hold:
// their checkpoint, served on the target's device (drafterDevice), their
// KV cache there, and the runner of their forwards (runner.Draft, with
// their attention backend). openDrafter starts one; close releases all
// of it, or as far as it got.
type drafterModel struct {
	ck  *model.Checkpoint
	dev *drafterDevice
	kv  *kvcache.Cache
	rn  *runner.Draft
}

// openDrafter serves m's checkpoint on the target's device and runs init
// (the drafter's model, cache and runner: setRunner); on an error it
// closes what was built.
func (e *Engine) openDrafter(m *drafterModel, init func() error) error {
	var err error
	if m.dev, err = e.drafterDevice(m.ck); err == nil {
		err = init()
	}
	if err != nil {
		m.close()
	}
	return err
}

// setRunner builds the drafter's attention backend of plan over m.kv and
// the runner of its forwards.
func (m *drafterModel) setRunner(plan *attention.Resolution, layers []attention.Layer, log *slog.Logger) error {
	attn, err := m.dev.attention(plan, m.kv, layers)
	if err != nil {
		return err
	}
	m.rn = runner.NewDraft(m.dev.rt, attn, m.kv, log)
	return nil
}

// close releases what openDrafter built.
func (m *drafterModel) close() {
	if m.kv != nil {
		_ = m.kv.Pool.Free()
	}
	m.dev.close()
	m.ck.Close()
}

// pool allocates a KV pool on the drafter's device.
func (dd *drafterDevice) pool(spec kvcache.Spec, slots, pageSize int) (*kvcache.Pool, error) {
	if dd.mem != nil {
		return kvcache.NewDevicePool(spec, slots, pageSize, dd.mem)
	}
	return kvcache.NewPool(spec, slots, pageSize)
}

// attention builds the drafter's attention backend of plan over kv.
func (dd *drafterDevice) attention(plan *attention.Resolution, kv *kvcache.Cache, layers []attention.Layer) (attention.Backend, error) {
	opts := attention.Options{Device: dd.rt.Name(), KV: kv, Runtime: dd.rt, Layers: layers}
	if a, ok := dd.ops.(device.Activations); ok {
		opts.Output = a.NewActivation
	}
	return plan.Build(opts)
}

// close closes the drafter's own ops (nil: the target's).
func (dd *drafterDevice) close() {
	if dd != nil && dd.host != nil {
		_ = dd.host.Close()
	}
}
