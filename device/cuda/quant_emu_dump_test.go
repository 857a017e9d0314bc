package cuda

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestQuantEmuDump writes the inputs of scripts/quant-emu (a CPU emulation
// of quant.cu's integer decode kernels) to $EMU_DUMP, one file a format:
// in and the rows of x (int32), then five compact matrices (q, k and v
// shaped, gate, up: out, body and scale plane in the device layout, the
// dequantised values, a bias or zeros), x (outliers 50 times the rest),
// a norm, and x's rows as the Go statement stages them (qiBytes). It
// does nothing without $EMU_DUMP.
func TestQuantEmuDump(t *testing.T) {
	dir := os.Getenv("EMU_DUMP")
	if dir == "" {
		t.Skip()
	}
	rng := rand.New(rand.NewPCG(7, 7))
	const in, xrows, inter = 512, 32, 48
	outs := []int{72, 40, 33, inter, inter}
	for _, dt := range quantFormats {
		var b bytes.Buffer
		w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
		w(int32(in))
		w(int32(xrows))
		for i, out := range outs {
			q, vals := quantWeight(t, rng, dt, out, in)
			p, _ := planQuant(dt, out, in)
			body, scales := make([]byte, out*p.bodyRow), make([]byte, out*p.scaleRow)
			p.pack(q.Data, body, scales)
			w(int32(out))
			w(int32(len(body)))
			b.Write(body)
			w(int32(len(scales)))
			b.Write(scales)
			w(vals)
			bias := make([]float32, out)
			if i == 1 || i == 3 {
				bias = randn(rng, out, 1)
			}
			w(bias)
		}
		x := randn(rng, xrows*in, 1)
		for i := 0; i < len(x); i += 61 {
			x[i] *= 50
		}
		w(x)
		w(randn(rng, in, 1))
		for r := range xrows {
			b.Write(qiBytes(dt, qiStage(dt, x[r*in:(r+1)*in])))
		}
		if err := os.WriteFile(filepath.Join(dir, quantName(dt)+".bin"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
