package cuda

import (
	"fmt"

	"github.com/gosling-ai/gosling/tensor"
)

// Synthetic weights (tensor.Synthetic, --load-format dummy) are made on
// the device by kernels/fill.cu: no host buffer, no upload.

// FillSynthetic writes elements [first, first+n) of the synthetic tensor
// syn, rounded to dt, to dst: the same bits as syn.Fill(dt, first, ...) on
// the host.
//
//	dst: [n] (dt: F32, BF16 or F16)
func (k *Kernels) FillSynthetic(s Stream, dst DevicePtr, first, n int, dt DType, syn tensor.Synthetic) error {
	if first < 0 || n < 0 {
		return fmt.Errorf("synthetic elements [%d, %d+%d)", first, first, n)
	}
	if n == 0 {
		return nil
	}
	switch dt {
	case F32, BF16, F16:
	default:
		return fmt.Errorf("no synthetic fill kernel for %v", dt)
	}
	return k.launchFillSynthetic(s, flatConfig(n), dt,
		fillSyntheticArgs{Out: dst, First: first, N: n, Seed: syn.Seed, Scale: syn.Scale, Offset: syn.Offset})
}

// fillSynthetic makes a synthetic weight of plan p at dst on the device in
// the plan's dtype, and waits for it (so a failure surfaces at load, and the
// weight is ready for any stream).
func (o *ModelOps) fillSynthetic(dst DevicePtr, p weightPlan, syn tensor.Synthetic) error {
	return o.dev.Do(func() error {
		err := o.k.FillSynthetic(o.stream, dst, 0, p.Out*p.In, p.DType, syn)
		if err == nil {
			err = o.dev.StreamSync(o.stream)
		}
		if err != nil {
			return fmt.Errorf("fill on the device: %w", err)
		}
		return nil
	})
}
