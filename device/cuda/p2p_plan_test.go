package cuda

import (
	"strings"
	"testing"
)

// TestARPlanAlgo: the default thresholds pick one-shot for decode sizes,
// two-shot only from vLLM's and SGLang's switch points at 3-8 ranks (never
// at two), and NCCL past MaxBytes.
func TestARPlanAlgo(t *testing.T) {
	for _, c := range []struct {
		ranks, bytes int
		want         ARAlgo
	}{
		{2, 4, AROneShot},
		{2, 16 << 10, AROneShot},
		{2, 1 << 20, AROneShot},
		{2, 4 << 20, AROneShot},
		{2, 4<<20 + 2, ARNCCL},
		{2, 32 << 20, ARNCCL},
		{4, 512<<10 - 4, AROneShot},
		{4, 512 << 10, ARTwoShot},
		{4, 4 << 20, ARTwoShot},
		{4, 4<<20 + 4, ARNCCL},
		{8, 256<<10 - 2, AROneShot},
		{8, 256 << 10, ARTwoShot},
		{3, 1 << 20, ARTwoShot},
		{6, 300 << 10, ARTwoShot},
	} {
		p := DefaultARPlan(c.ranks)
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := p.Algo(c.bytes); got != c.want {
			t.Errorf("%d ranks, %d bytes: %v, want %v", c.ranks, c.bytes, got, c.want)
		}
	}
}

// TestARPlanFromEnv: each GOSLING_CUSTOM_AR_* variable overrides its
// field (sizes with K and M suffixes, off for no two-shot), and a bad
// value is an error that names the variable.
func TestARPlanFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	p, err := ARPlanFromEnv(2, env())
	if err != nil || p != DefaultARPlan(2) {
		t.Fatalf("no variables: %+v, %v; want the defaults %+v", p, err, DefaultARPlan(2))
	}
	p, err = ARPlanFromEnv(2, env(EnvCustomARMaxBytes, "8M", EnvCustomARTwoShotBytes, "512k", EnvCustomARBlocks, "36"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (ARPlan{Ranks: 2, MaxBytes: 8 << 20, TwoShotBytes: 512 << 10, Blocks: 36}); p != want {
		t.Errorf("overrides: %+v, want %+v", p, want)
	}
	if p.Algo(512<<10) != ARTwoShot || p.Algo(512<<10-4) != AROneShot || p.Algo(8<<20+4) != ARNCCL {
		t.Errorf("overridden plan %v picks %v, %v, %v", p, p.Algo(512<<10), p.Algo(512<<10-4), p.Algo(8<<20+4))
	}
	p, err = ARPlanFromEnv(8, env(EnvCustomARTwoShotBytes, "off", EnvCustomARMaxBytes, "65536"))
	if err != nil || p.TwoShotBytes != NoTwoShot || p.MaxBytes != 65536 || p.Algo(65536) != AROneShot {
		t.Errorf("two-shot off: %+v, %v", p, err)
	}
	p, err = ARPlanFromEnv(2, env(EnvCustomARTwoShotBytes, "0"))
	if err != nil || p.Algo(4) != ARTwoShot {
		t.Errorf("two-shot from 0 bytes: %+v, %v", p, err)
	}
	for _, bad := range [][2]string{
		{EnvCustomARMaxBytes, "0"}, {EnvCustomARMaxBytes, "lots"}, {EnvCustomARMaxBytes, "-1K"}, {EnvCustomARMaxBytes, "1G"},
		{EnvCustomARTwoShotBytes, "sometimes"}, {EnvCustomARTwoShotBytes, "-4"},
		{EnvCustomARBlocks, "0"}, {EnvCustomARBlocks, "129"}, {EnvCustomARBlocks, "x"},
	} {
		_, err := ARPlanFromEnv(2, env(bad[0], bad[1]))
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v, want an error naming the variable", bad[0], bad[1], err)
		}
	}
	if _, err := ARPlanFromEnv(9, env()); err == nil {
		t.Errorf("9 ranks: no error (the flag rows hold %d)", P2PMaxRanks)
	}
}

// TestARPlanGrid: the launch shape for the sizes decode steps all-reduce.
// Up to 32 blocks of 512 threads every thread moves one 16-byte vector
// (16 KiB: 2 blocks; 256 KiB: 32), beyond that the 32 blocks loop; no
// block is left without vectors.
func TestARPlanGrid(t *testing.T) {
	p := DefaultARPlan(2)
	for _, c := range []struct{ bytes, g, r int }{
		{4, 1, 1},
		{16, 1, 1},
		{17, 1, 2},
		{8 << 10, 1, 512},
		{16 << 10, 2, 512},
		{16<<10 + 4, 3, 342},
		{64 << 10, 8, 512},
		{256 << 10, 32, 512},
		{256<<10 + 16, 32, 513},
		{1 << 20, 32, 2048},
		{4 << 20, 32, 8192},
	} {
		g, r, need := p.grid(c.bytes, AROneShot)
		if g != c.g || r != c.r || need != r {
			t.Errorf("%d bytes one-shot: %d blocks of %d vectors (area %d), want %d of %d", c.bytes, g, r, need, c.g, c.r)
		}
		if _, r2, need2 := p.grid(c.bytes, ARTwoShot); r2 != r || need2 != 2*((r+1)/2) {
			t.Errorf("%d bytes two-shot: %d vectors, area %d; want %d, %d", c.bytes, r2, need2, r, 2*((r+1)/2))
		}
	}
}

// TestARPlanAreas: for every size a plan sends to the peer kernels, the
// blocks' ranges, split as the kernels split them (allreduce.cu's
// p2p_begin and two-shot parts, mirrored here), tile the vectors once,
// each rank's part has one owner, and every offset lands inside one
// receive area; the default plans' receive memory stays small.
func TestARPlanAreas(t *testing.T) {
	plans := []ARPlan{DefaultARPlan(2), DefaultARPlan(4), DefaultARPlan(8),
		{Ranks: 2, MaxBytes: 1 << 20, TwoShotBytes: 64 << 10, Blocks: 32},
		{Ranks: 3, MaxBytes: 3<<20 + 5, TwoShotBytes: 100_000, Blocks: 7},
		{Ranks: 8, MaxBytes: 1 << 20, TwoShotBytes: 0, Blocks: 128},
		{Ranks: 5, MaxBytes: 999_999, TwoShotBytes: NoTwoShot, Blocks: 1}}
	for _, p := range plans {
		area := p.areaBytes() / p2pVec
		for bytes := 1; bytes <= p.MaxBytes; {
			algo := p.Algo(bytes)
			g, r, need := p.grid(bytes, algo)
			if need > area || g < 1 || g > p.Blocks {
				t.Fatalf("%v: %d bytes %v: %d blocks, area of %d vectors needed, %d sized", p, bytes, algo, g, need, area)
			}
			vecs := (bytes + p2pVec - 1) / p2pVec
			if bytes < 4096 || bytes%9973 == 0 {
				checkSplit(t, p, bytes, g, vecs, algo, area)
			} else if (g-1)*r >= vecs || g*r < vecs {
				t.Fatalf("%v: %d bytes: %d blocks of %d vectors for %d", p, bytes, g, r, vecs)
			}
			// Every size near the edges, then a stride (prime, so that
			// it meets every residue of 16 and of the block sizes).
			if bytes < 1<<16 || p.MaxBytes-bytes < 1<<12 {
				bytes++
			} else {
				bytes += 331
			}
		}
	}
	for _, ranks := range []int{2, 4, 8} {
		if got := DefaultARPlan(ranks).receiveBytes(); got > 16<<20 {
			t.Errorf("%d ranks: %d bytes of receive memory a GPU, want at most 16 MiB", ranks, got)
		}
	}
}

// checkSplit walks the kernels' index math for one launch.
func checkSplit(t *testing.T, p ARPlan, bytes, g, vecs int, algo ARAlgo, area int) {
	t.Helper()
	seen := make([]int, vecs)
	r := (vecs + g - 1) / g
	for b := range g {
		lo := min(b*r, vecs)
		hi := min(lo+r, vecs)
		if lo == hi {
			t.Fatalf("%v: %d bytes: block %d of %d has no vectors", p, bytes, b, g)
		}
		part := (hi - lo + p.Ranks - 1) / p.Ranks
		for v := lo; v < hi; v++ {
			seen[v]++
			off := v - lo
			if algo == ARTwoShot {
				q := off / part
				mine := lo + q*part
				if q >= p.Ranks || v-mine >= part || part+(v-mine) >= area {
					t.Fatalf("%v: %d bytes: vector %d: owner %d, offsets %d and %d past part %d or area %d",
						p, bytes, v, q, v-mine, part+(v-mine), part, area)
				}
				continue
			}
			if off >= area {
				t.Fatalf("%v: %d bytes: vector %d at %d, past the area of %d", p, bytes, v, off, area)
			}
		}
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("%v: %d bytes: vector %d taken %d times", p, bytes, v, n)
		}
	}
}
