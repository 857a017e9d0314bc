package cuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Which all-reduces the peer-memory kernels (kernels/allreduce.cu) take,
// and their launch shape: every threshold of the custom all-reduce is
// here, each overridable by an environment variable for A/B runs on the
// device (read once, when the group is made, by ARPlanFromEnv).
const (
	// customARMaxBytes is the largest all-reduce the peer kernels take by
	// default; larger ones (prefill's) stay with NCCL. Decode steps' are
	// a few hundred KiB (batch 64 of a 4,096-wide float32 hidden state is
	// 1 MiB). vLLM and SGLang stop at 8 MiB.
	customARMaxBytes = 4 << 20
	// From these sizes up two-shot (reduce-scatter then all-gather) runs
	// instead of one-shot, as vLLM and SGLang switch for fully connected
	// NVLink at 3-4 and 5-8 ranks. At two ranks never: one-shot already
	// moves no more than a ring would (each rank sends x once), and
	// two-shot only adds a barrier (vLLM and SGLang run one-shot at every
	// size there too).
	customARTwoShot4 = 512 << 10
	customARTwoShot8 = 256 << 10
	// customARBlocks is the most blocks a launch uses: 32 blocks of 512
	// threads are 16,384 threads, one 16-byte vector each at 256 KiB, so
	// that every size up to 256 KiB is a single round of loads and
	// stores (16 KiB takes 2 blocks); larger ones loop. Every block runs
	// its own barrier, so blocks beyond what the data needs only add
	// flags (the grid follows the size, ARPlan.grid).
	customARBlocks = 32
	// p2pThreads is every block's size (the kernels' __launch_bounds__).
	p2pThreads = 512
	// p2pMaxBlocks bounds GOSLING_CUSTOM_AR_BLOCKS: blocks wait for their
	// peers' blocks, so a grid must be resident at once on every GPU
	// (an H100 has 132 SMs).
	p2pMaxBlocks = 128
	// p2pVec is the bytes of one vector: every access of a peer's memory
	// is one 16-byte load or store.
	p2pVec = 16
)

// The environment variables that override ARPlan's defaults.
const (
	EnvCustomARMaxBytes     = "GOSLING_CUSTOM_AR_MAX_BYTES"      // ARPlan.MaxBytes: 4096, 512K, 8M
	EnvCustomARTwoShotBytes = "GOSLING_CUSTOM_AR_TWO_SHOT_BYTES" // ARPlan.TwoShotBytes: a size, or off
	EnvCustomARBlocks       = "GOSLING_CUSTOM_AR_BLOCKS"         // ARPlan.Blocks
)

// ARAlgo is how one all-reduce runs.
type ARAlgo uint8

const (
	// ARNCCL: past the peer kernels; the NCCL communicator runs it.
	ARNCCL ARAlgo = iota
	// AROneShot: every rank pushes x to every peer, one barrier, each
	// sums locally.
	AROneShot
	// ARTwoShot: reduce-scatter then all-gather over peer memory, two
	// barriers.
	ARTwoShot
)

func (a ARAlgo) String() string {
	switch a {
	case ARNCCL:
		return "nccl"
	case AROneShot:
		return "one-shot"
	case ARTwoShot:
		return "two-shot"
	}
	return fmt.Sprintf("ARAlgo(%d)", uint8(a))
}

// NoTwoShot as ARPlan.TwoShotBytes: one-shot up to MaxBytes.
const NoTwoShot = math.MaxInt

// ARPlan decides, for a group of Ranks GPUs, which path an all-reduce of
// a given size takes and how it is launched. Every rank of a group holds
// the same plan (the kernels' invariants need the same grid everywhere).
type ARPlan struct {
	Ranks int
	// MaxBytes: larger all-reduces go to NCCL.
	MaxBytes int
	// TwoShotBytes: all-reduces from this size up to MaxBytes run
	// two-shot, smaller ones one-shot; NoTwoShot for never.
	TwoShotBytes int
	// Blocks is the most blocks of p2pThreads a launch uses.
	Blocks int
}

// DefaultARPlan is the plan for ranks GPUs without overrides.
func DefaultARPlan(ranks int) ARPlan {
	p := ARPlan{Ranks: ranks, MaxBytes: customARMaxBytes, TwoShotBytes: NoTwoShot, Blocks: customARBlocks}
	switch {
	case ranks > 4:
		p.TwoShotBytes = customARTwoShot8
	case ranks > 2:
		p.TwoShotBytes = customARTwoShot4
	}
	return p
}

// ARPlanFromEnv is DefaultARPlan(ranks) with the GOSLING_CUSTOM_AR_*
// variables that lookup (os.LookupEnv) finds applied; a value that does
// not parse is an error naming the variable.
func ARPlanFromEnv(ranks int, lookup func(string) (string, bool)) (ARPlan, error) {
	p := DefaultARPlan(ranks)
	if v, ok := lookup(EnvCustomARMaxBytes); ok {
		n, err := parseARBytes(v)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("%s=%q: want a positive size such as 1048576, 512K or 8M", EnvCustomARMaxBytes, v)
		}
		p.MaxBytes = n
	}
	if v, ok := lookup(EnvCustomARTwoShotBytes); ok {
		if s := strings.ToLower(strings.TrimSpace(v)); s == "off" || s == "never" {
			p.TwoShotBytes = NoTwoShot
		} else if n, err := parseARBytes(v); err == nil && n >= 0 {
			p.TwoShotBytes = n
		} else {
			return p, fmt.Errorf("%s=%q: want a size such as 0, 512K or 2M, or off", EnvCustomARTwoShotBytes, v)
		}
	}
	if v, ok := lookup(EnvCustomARBlocks); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > p2pMaxBlocks {
			return p, fmt.Errorf("%s=%q: want 1 to %d blocks", EnvCustomARBlocks, v, p2pMaxBlocks)
		}
		p.Blocks = n
	}
	return p, p.Validate()
}

// parseARBytes reads 4096, 64K or 8M (powers of 1024).
func parseARBytes(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("size %q", s)
	}
	return n * mult, nil
}

// Validate reports a plan the kernels cannot run.
func (p ARPlan) Validate() error {
	switch {
	case p.Ranks < 2 || p.Ranks > P2PMaxRanks:
		return fmt.Errorf("cuda: a peer all-reduce of %d ranks (2 to %d)", p.Ranks, P2PMaxRanks)
	case p.MaxBytes <= 0:
		return fmt.Errorf("cuda: peer all-reduce of at most %d bytes", p.MaxBytes)
	case p.TwoShotBytes < 0:
		return fmt.Errorf("cuda: peer all-reduce two-shot from %d bytes", p.TwoShotBytes)
	case p.Blocks < 1 || p.Blocks > p2pMaxBlocks:
		return fmt.Errorf("cuda: peer all-reduce of %d blocks (1 to %d)", p.Blocks, p2pMaxBlocks)
	}
	return nil
}

// Algo is the path of an all-reduce of bytes: one-shot below
// TwoShotBytes, two-shot from there to MaxBytes, NCCL beyond.
func (p ARPlan) Algo(bytes int) ARAlgo {
	switch {
	case bytes > p.MaxBytes:
		return ARNCCL
	case bytes >= p.TwoShotBytes:
		return ARTwoShot
	}
	return AROneShot
}

func (p ARPlan) String() string {
	two := "off"
	if p.TwoShotBytes != NoTwoShot {
		two = fmt.Sprintf("from %d bytes", p.TwoShotBytes)
	}
	return fmt.Sprintf("%d ranks: peer memory up to %d bytes (two-shot %s), NCCL beyond; at most %d blocks of %d threads",
		p.Ranks, p.MaxBytes, two, p.Blocks, p2pThreads)
}

// grid is the launch of an all-reduce of bytes: g blocks, each taking r
// of the ceil(bytes/16) vectors (the kernels' p2p_begin splits the same
// way), and the vectors of a receive area block b's share needs (r
// one-shot; two parts of ceil(r/Ranks) two-shot). Up to Blocks·p2pThreads
// vectors, every thread moves one vector; beyond, all Blocks blocks loop.
// g is trimmed so that no block is left without vectors.
func (p ARPlan) grid(bytes int, algo ARAlgo) (g, r, need int) {
	vecs := max((bytes+p2pVec-1)/p2pVec, 1)
	g = min(p.Blocks, (vecs+p2pThreads-1)/p2pThreads)
	r = (vecs + g - 1) / g
	g = (vecs + r - 1) / r
	need = r
	if algo == ARTwoShot {
		need = 2 * ((r + p.Ranks - 1) / p.Ranks)
	}
	return g, r, need
}

// areaBytes is the size of one receive area: room for block b's share
// of any one-shot all-reduce the plan sends one-shot and any two-shot
// one up to MaxBytes (see grid: a share is at most p2pThreads vectors
// while the grid grows, then ceil(vecs/Blocks)).
func (p ARPlan) areaBytes() int {
	most := func(bytes int) int {
		vecs := (bytes + p2pVec - 1) / p2pVec
		return max(min(p2pThreads, vecs), (vecs+p.Blocks-1)/p.Blocks, 1)
	}
	need := most(min(p.MaxBytes, p.TwoShotBytes))
	if p.TwoShotBytes <= p.MaxBytes {
		need = max(need, 2*((most(p.MaxBytes)+p.Ranks-1)/p.Ranks))
	}
	return need * p2pVec
}

// receiveBytes is each GPU's receive memory: an area per block, half
// (alternate calls) and sending rank.
func (p ARPlan) receiveBytes() int { return 2 * p.Blocks * p.Ranks * p.areaBytes() }
