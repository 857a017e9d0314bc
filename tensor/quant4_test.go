package tensor

import (
	"encoding/binary"
	"testing"
)

// TestDecodeMXFP4Block: ggml's block_mxfp4 layout: the E8M0 scale first,
// value j in byte 1+j's low nibble and j+16 in its high one, codes 8-15
// the negatives of 0-7.
func TestDecodeMXFP4Block(t *testing.T) {
	blk := make([]byte, 17)
	blk[0] = 128   // 2^1
	blk[1] = 0x21  // value 0: code 1 (0.5), value 16: code 2 (1)
	blk[2] = 0xF7  // value 1: code 7 (6), value 17: code 15 (-6)
	blk[16] = 0x9D // value 15: code 13 (-3), value 31: code 9 (-0.5)
	dst := make([]float32, 32)
	DecodeInto(MXFP4, blk, dst)
	want := map[int]float32{0: 1, 16: 2, 1: 12, 17: -12, 15: -6, 31: -1}
	for i, v := range dst {
		if v != want[i] {
			t.Errorf("value %d = %g, want %g", i, v, want[i])
		}
	}
	if E8M0(0) == 0 || E8M0(127) != 1 || E8M0(130) != 8 {
		t.Errorf("E8M0: 2^-127 = %g, 2^0 = %g, 2^3 = %g", E8M0(0), E8M0(127), E8M0(130))
	}
}

// TestDecodeAWQ4Block: an AWQ group of 64: f16 scale, u16 zero point,
// then per run of 32 values 16 bytes, value 32c+j in the low nibble of
// byte 16c+j and 32c+16+j in its high one; value s·(q − z).
func TestDecodeAWQ4Block(t *testing.T) {
	blk := make([]byte, 4+32)
	binary.LittleEndian.PutUint16(blk, F32ToF16(0.25))
	binary.LittleEndian.PutUint16(blk[2:], 5)
	for i := 4; i < len(blk); i++ {
		blk[i] = 0x55 // every quant the zero point: 0
	}
	blk[4] = 0xF0    // value 0: q 0, value 16: q 15
	blk[4+17] = 0x7A // value 33: q 10, value 49: q 7
	dst := make([]float32, 64)
	DecodeInto(AWQ4_G64, blk, dst)
	want := map[int]float32{0: -1.25, 16: 2.5, 33: 1.25, 49: 0.5}
	for i, v := range dst {
		if v != want[i] {
			t.Errorf("value %d = %g, want %g", i, v, want[i])
		}
	}
	for _, g := range []int{32, 64, 128} {
		d, ok := AWQ4Format(g)
		if n, _ := d.RowBytes(256); !ok || BlockValues(d) != g || n != 256/g*(4+g/2) {
			t.Errorf("group %d: %v, %d values a block, %d bytes a row of 256", g, d, BlockValues(d), n)
		}
	}
	if _, ok := AWQ4Format(256); ok {
		t.Error("AWQ4Format(256) has a format")
	}
}
