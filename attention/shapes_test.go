package attention_test

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// TestCheckShapes: one check reads host tensors (len(Data)) and device
// tensors (Shape, Data nil) alike, as T or as their Host and Device views,
// and HostQKV refuses device memory.
func TestCheckShapes(t *testing.T) {
	layer := &attention.Layer{NumHeads: 4, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8}
	kv, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8}, 1, 16, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	b := &forward.Batch{Mode: forward.Decode, InputIDs: []int32{1, 2, 3}, KV: kv}
	host := func(rows, cols int) tensor.T { return tensor.New(rows, cols) }
	dev := func(rows, cols int) tensor.T {
		return tensor.Device{Shape: []int{rows, cols}, Ptr: 0x1000, DType: tensor.BF16}.T()
	}
	for name, mk := range map[string]func(rows, cols int) tensor.T{"host": host, "device": dev} {
		q, k, v := mk(3, 32), mk(3, 16), mk(3, 16)
		if err := attention.CheckShapes(q, k, v, layer, b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		views := [3]attention.Shaped{}
		for i, x := range [3]tensor.T{q, k, v} {
			if name == "host" {
				h, err := x.Host()
				if err != nil {
					t.Fatal(err)
				}
				views[i] = h
			} else {
				d, err := x.Device()
				if err != nil {
					t.Fatal(err)
				}
				views[i] = d
			}
		}
		if err := attention.CheckShapes(views[0], views[1], views[2], layer, b); err != nil {
			t.Errorf("%s views: %v", name, err)
		}
		if err := attention.CheckShapes(views[1], views[1], views[2], layer, b); err == nil || !strings.Contains(err.Error(), "q has 48 values in rows of 16") {
			t.Errorf("%s views, k for q: %v", name, err)
		}
		for _, tc := range []struct {
			q, k, v tensor.T
			want    string
		}{
			{mk(2, 32), k, v, "q has 64 values in rows of 32, want [3, 32]"},
			{q, mk(6, 8), v, "k has 48 values in rows of 8, want [3, 16]"},
			{q, k, tensor.T{}, "v has 0 values in rows of 0, want [3, 16]"},
		} {
			if err := attention.CheckShapes(tc.q, tc.k, tc.v, layer, b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", name, err, tc.want)
			}
		}
	}
	if _, err := attention.HostQKV(dev(3, 32), dev(3, 16), dev(3, 16), layer, b); err == nil || !strings.Contains(err.Error(), "q is in device memory") {
		t.Errorf("HostQKV over device tensors: %v", err)
	}
	if _, err := attention.HostQKV(host(3, 32), dev(3, 16), host(3, 16), layer, b); err == nil || !strings.Contains(err.Error(), "k is in device memory") {
		t.Errorf("HostQKV over a device k: %v", err)
	}
	if _, err := attention.HostQKV(host(3, 32), host(3, 8), host(3, 16), layer, b); err == nil || !strings.Contains(err.Error(), "k has 24 values") {
		t.Errorf("HostQKV over a short k: %v", err)
	}
	devKV, err := kvcache.NewCacheWithPool(kvcache.Spec{NumLayers: 1, NumKVHeads: 2, HeadDim: 8, HeadDimV: 8}, 1, 16, 1, 16,
		func(spec kvcache.Spec, slots, pageSize int) (*kvcache.Pool, error) {
			return kvcache.NewDevicePool(spec, slots, pageSize, &addrMemory{})
		})
	if err != nil {
		t.Fatal(err)
	}
	onDev := &forward.Batch{Mode: forward.Decode, InputIDs: []int32{1, 2, 3}, KV: devKV}
	if _, err := attention.HostQKV(host(3, 32), host(3, 16), host(3, 16), layer, onDev); err == nil || !strings.Contains(err.Error(), "KV pool is in device memory") {
		t.Errorf("HostQKV over a device pool: %v", err)
	}
	q := host(3, 32)
	q.HostData()[5] = 7
	in, err := attention.HostQKV(q, host(3, 16), host(3, 16), layer, b)
	if err != nil || in.Q.Row(0)[5] != 7 || in.Q.Len() != 96 || in.KV == nil {
		t.Errorf("HostQKV: %v, q row 0 %v, pool %v", err, in.Q.Row(0), in.KV)
	}

	mla := &attention.Layer{NumHeads: 4, NumKVHeads: 1, HeadDim: 16, HeadDimV: 8, MLA: true}
	mkv, err := kvcache.NewCache(kvcache.Spec{NumLayers: 1, NumKVHeads: 1, HeadDim: 16, HeadDimV: 8, SharedV: true}, 1, 16, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	mb := &forward.Batch{Mode: forward.Decode, InputIDs: []int32{1}, KV: mkv}
	if err := attention.CheckShapes(dev(1, 64), dev(1, 16), tensor.T{}, mla, mb); err != nil {
		t.Errorf("MLA: %v", err)
	}
	for _, v := range []tensor.T{dev(1, 8), host(1, 8)} {
		if err := attention.CheckShapes(dev(1, 64), dev(1, 16), v, mla, mb); err == nil || !strings.Contains(err.Error(), "takes no v") {
			t.Errorf("MLA with a v: %v", err)
		}
	}
}

// addrMemory hands out device addresses that nothing reads: a device
// pool's bookkeeping without a GPU.
type addrMemory struct{ next uintptr }

func (m *addrMemory) Alloc(bytes int) (uintptr, error) {
	m.next += 0x1000 + uintptr(bytes)
	return m.next, nil
}

func (*addrMemory) Free(uintptr) {}
