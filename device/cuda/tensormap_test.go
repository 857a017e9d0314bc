package cuda

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/gosling-ai/gosling/tensor"
)

// TestTiledMapValidate: the rules cuTensorMapEncodeTiled documents, each
// broken once from a map that meets them all.
func TestTiledMapValidate(t *testing.T) {
	good := func() TiledMap {
		return TiledMap{DType: tensor.BF16, Base: 1 << 20, Dims: []uint64{128, 32, 300}, Strides: []uint64{256, 256 * 40},
			Box: []uint32{64, 4, 32}, Swizzle128: true}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := good().BoxBytes(); got != 64*4*32*2 {
		t.Errorf("box bytes %d", got)
	}
	for _, tc := range []struct {
		edit func(*TiledMap)
		want string
	}{
		{func(m *TiledMap) { m.DType = tensor.F32 }, "dtype"},
		{func(m *TiledMap) { m.Dims, m.Strides, m.Box = nil, nil, nil }, "rank 0"},
		{func(m *TiledMap) { m.Strides = m.Strides[:1] }, "1 strides and 3 box dims for rank 3"},
		{func(m *TiledMap) { m.Base += 8 }, "not 16-byte aligned"},
		{func(m *TiledMap) { m.Dims[2] = 0 }, "dim 2 is 0 elements"},
		{func(m *TiledMap) { m.Strides[0] = 264 }, "stride 1 is 264 bytes"},
		{func(m *TiledMap) { m.Strides[0] = 128 }, "less than the 256 bytes"},
		{func(m *TiledMap) { m.Strides[1] = 256 * 16 }, "less than the 8192 bytes"},
		{func(m *TiledMap) { m.Box[2] = 257 }, "box dim 2 is 257"},
		{func(m *TiledMap) { m.Box[0] = 4 }, "inner dim is 8 bytes"},
		{func(m *TiledMap) { m.Box[0] = 128 }, "inner dim is 256 bytes"},
	} {
		m := good()
		tc.edit(&m)
		if err := m.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", m, err, tc.want)
		}
	}
	m := good()
	m.Box[0], m.Swizzle128 = 128, false
	if err := m.Validate(); err != nil {
		t.Errorf("a 256-byte inner box without swizzle: %v", err)
	}
	if w := alignedWords(tensorMapWords); len(w) != tensorMapWords || uintptr(unsafe.Pointer(&w[0]))%tensorMapAlign != 0 {
		t.Errorf("alignedWords: %d words at %p", len(w), &w[0])
	}
}
