package gpu

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// TestCheckDevice: the views CheckDevice returns are q, k and v as device
// tensors; host memory, mixed dtypes and wrong shapes are refused, and an
// MLA layer's v must be absent.
func TestCheckDevice(t *testing.T) {
	b := &forward.Batch{Mode: forward.Encode, InputIDs: []int32{1, 2, 3}}
	layer := &attention.Layer{NumHeads: 4, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8}
	dev := func(rows, cols int, dt tensor.DType, at uintptr) tensor.T {
		return tensor.Device{Shape: []int{rows, cols}, Ptr: at, DType: dt}.T()
	}
	q, k, v := dev(3, 32, tensor.BF16, 0x1000), dev(3, 16, tensor.BF16, 0x2000), dev(3, 16, tensor.BF16, 0x3000)
	qd, kd, vd, err := CheckDevice(q, k, v, layer, b)
	if err != nil {
		t.Fatal(err)
	}
	if qd.Ptr != 0x1000 || kd.Ptr != 0x2000 || vd.Ptr != 0x3000 || qd.DType != tensor.BF16 || kd.Cols() != 16 || qd.Len() != 96 {
		t.Errorf("views %+v %+v %+v", qd, kd, vd)
	}
	for _, tc := range []struct {
		q, k, v tensor.T
		want    string
	}{
		{q, tensor.New(3, 16), v, "k is not on the GPU"},
		{q, k, tensor.T{}, "v is not on the GPU"},
		{q, dev(3, 16, tensor.F16, 0x2000), v, "k is F16; q, k, v must share"},
		{q, dev(2, 16, tensor.BF16, 0x2000), v, "k has 32 values in rows of 16, want [3, 16]"},
	} {
		if _, _, _, err := CheckDevice(tc.q, tc.k, tc.v, layer, b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}

	mla := &attention.Layer{NumHeads: 4, NumKVHeads: 1, HeadDim: 16, HeadDimV: 8, MLA: true}
	mb := &forward.Batch{Mode: forward.Encode, InputIDs: []int32{1}}
	if _, _, vd, err := CheckDevice(dev(1, 64, tensor.BF16, 0x1000), dev(1, 16, tensor.BF16, 0x2000), tensor.T{}, mla, mb); err != nil || vd.Ptr != 0 || vd.Len() != 0 {
		t.Errorf("MLA: %+v, %v", vd, err)
	}
	for _, v := range []tensor.T{dev(1, 8, tensor.BF16, 0x3000), tensor.New(1, 8)} {
		if _, _, _, err := CheckDevice(dev(1, 64, tensor.BF16, 0x1000), dev(1, 16, tensor.BF16, 0x2000), v, mla, mb); err == nil || !strings.Contains(err.Error(), "takes no v") {
			t.Errorf("MLA with a v: %v", err)
		}
	}
}
