package eagle

import (
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/model/safetensors"
)

// TestReadD2T: d2t holds offsets from draft to target ids; a map of the
// wrong size, outside the target's vocabulary or onto one target token
// twice is refused with what is wrong.
func TestReadD2T(t *testing.T) {
	write := func(offsets ...int64) *safetensors.File {
		data := make([]byte, 8*len(offsets))
		for i, o := range offsets {
			binary.LittleEndian.PutUint64(data[8*i:], uint64(o))
		}
		path := filepath.Join(t.TempDir(), "model.safetensors")
		if err := safetensors.Write(path, []safetensors.Tensor{{Name: "d2t", DType: "I64", Shape: []int{len(offsets)}, Data: data}}); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	got, err := readD2T(write(0, 2, 5), 3, 10, "head")
	if err != nil || len(got) != 3 || got[0] != 0 || got[1] != 3 || got[2] != 7 {
		t.Fatalf("readD2T = %v, %v; want [0 3 7]", got, err)
	}
	for _, c := range []struct {
		offsets []int64
		want    string
	}{
		{[]int64{0, 2}, "d2t is I64 [2]; want I64 [3] (config.json draft_vocab_size)"},
		{[]int64{0, 2, 8}, "maps draft token 2 to target token 10, outside the target's vocabulary of 10"},
		{[]int64{1, 0, 5}, "maps draft tokens 0 and 1 both to target token 1"},
		{[]int64{-1, 0, 0}, "maps draft token 0 to target token -1"},
	} {
		if _, err := readD2T(write(c.offsets...), 3, 10, "head"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("offsets %v: %v, want an error with %q", c.offsets, err, c.want)
		}
	}
}
