package device

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// Runtime is one opened device as the engine holds it: the model's kernels
// on it, the memory its KV cache lives in, the host worker pool, the thread
// its work runs on, and how to let it go. What only some devices can do is
// a separate interface found by type assertion (Graphs, Sampler,
// MemoryInfo), so the engine asks for a capability, never for a device.
type Runtime interface {
	// Name is the device: "cpu" or "cuda".
	Name() string
	// Ops are the model's non-attention kernels on this device.
	Ops() Ops
	// Workers is the host worker pool the runtime carries (the host's
	// kernels run on it; CPU attention and host sampling split over it on
	// every device); nil: host work runs serially. The pool is its
	// opener's to close (OpenOptions.Workers).
	Workers() Workers
	// KVMemory is the memory a device-resident KV pool is allocated from
	// (kvcache.NewDevicePool); nil: the pool lives in host memory.
	KVMemory() kvcache.DeviceMemory
	// Run runs fn on the device's thread (a whole forward, or work beside
	// it on the same stream) and returns its error.
	Run(fn func() error) error
	// Close releases what the runtime opened. A KV pool allocated from
	// KVMemory must be freed first.
	Close() error
}

// Workers is a host worker pool (cpu.Workers): For runs fn over [0, n)
// in contiguous ranges of at least minChunk, on the pool's goroutines, and
// returns when all are done; N is how many goroutines it has. It is here,
// not in device/cpu, so that a Runtime of any device can carry one.
type Workers interface {
	N() int
	For(n, minChunk int, fn func(lo, hi int))
}

// Graphs is a Runtime that can capture a forward once and replay it
// (CUDA graphs).
type Graphs interface {
	// RunGraph runs forward through the graph kept under key: captured
	// the first time, replayed after, or run eagerly when the forward
	// cannot be captured (GraphRun says which, and why).
	RunGraph(key int, forward func() error) (GraphRun, error)
}

// GroupGraphs is a Graphs runtime whose forwards may contain collectives
// shared with other ranks (tensor parallelism). NCCL requires a captured
// collective to be captured by every rank of the group at once and each
// rank to replay the graph of that same capture, so every rank must take
// the same path on every step: RunGroupGraph asks agree at each decision
// (after its dry run, after a capture) and follows the group's answer.
type GroupGraphs interface {
	Graphs
	RunGroupGraph(key int, forward func() error, agree GraphAgree) (GraphRun, error)
	// ReleaseGraphs destroys every graph held (a later step captures
	// again). A graph that captured a collective holds a reference on its
	// NCCL communicator, whose destroy waits until the reference is gone:
	// the group's graphs go before its communicators.
	ReleaseGraphs() error
}

// GraphAgree hands one rank's vote to the group and returns the
// combination of every rank's vote for the same decision (CombineVotes
// over the ranks). It blocks until every rank voted; an error (the group
// was aborted) fails the step.
type GraphAgree func(GraphVote) (GraphVote, error)

// GraphVote is one rank's say in a graph decision.
type GraphVote struct {
	// Eager: this rank cannot run the step through a graph (its dry run
	// found an operation a graph cannot hold; its capture failed).
	Eager bool
	// Hold: this rank runs the step eagerly on purpose (a profiled step),
	// so the group does too without counting it against graphs.
	Hold bool
	// Graph is the group capture whose graph this rank's dry run matched,
	// 0 for none. Group captures are numbered alike on every rank (each
	// rank counts the captures the group agreed on), so equal numbers are
	// graphs of one collective capture.
	Graph uint64
}

// CombineVotes is the group's vote from two ranks' (or partial
// combinations'): eager if either is, and a graph only if both matched
// the same one; held if either holds.
func CombineVotes(a, b GraphVote) GraphVote {
	v := GraphVote{Eager: a.Eager || b.Eager, Hold: a.Hold || b.Hold}
	if a.Graph == b.Graph {
		v.Graph = a.Graph
	}
	return v
}

// GraphPath is how RunGraph ran a forward.
type GraphPath int

const (
	GraphReplayed GraphPath = iota // an existing graph was launched
	GraphCaptured                  // a new graph was captured and launched
	GraphEager                     // the forward ran without a graph
)

func (p GraphPath) String() string {
	return [...]string{"replayed", "captured", "eager"}[p]
}

// GraphRun reports one RunGraph.
type GraphRun struct {
	Path    GraphPath
	Nodes   int           // operations in the graph (replayed or captured)
	Capture time.Duration // capture and instantiation time (GraphCaptured)
	Reason  string        // why the forward ran eagerly (GraphEager)
	// Held: eager because a rank of a tensor-parallel group held the
	// group off graphs for this step (GraphVote.Hold); it says nothing of
	// whether the forward can be captured.
	Held bool
}

// GraphBatchSizes are the decode batch sizes to capture graphs for, up to
// maxBatch: 1, 2, 4, 8, then every 8 up to 256, then every 16. Small sizes
// are dense because that is where decode spends its time and where padding
// costs most; each graph costs start-up time and a little memory. maxBatch
// itself is always included.
func GraphBatchSizes(maxBatch int) []int {
	var sizes []int
	for bs := 1; bs <= maxBatch; {
		sizes = append(sizes, bs)
		switch {
		case bs < 8:
			bs *= 2
		case bs < 256:
			bs += 8
		default:
			bs += 16
		}
	}
	if maxBatch > 0 && sizes[len(sizes)-1] != maxBatch {
		sizes = append(sizes, maxBatch)
	}
	return sizes
}

// PaddedBatchSize is the smallest captured size that holds n requests, or
// false when n is above every captured size (run that batch without a graph).
// sizes must be sorted ascending.
func PaddedBatchSize(n int, sizes []int) (int, bool) {
	i, _ := slices.BinarySearch(sizes, n)
	if i == len(sizes) {
		return 0, false
	}
	return sizes[i], true
}

// Sampler is a Runtime whose model leaves its logits in device memory and
// that can draw tokens there, so only ids cross to the host.
type Sampler interface {
	// Sample draws one token per row of rows from logits [n, vocab].
	Sample(logits tensor.T, rows []SampleRow) ([]int32, error)
	// GatherRows is the listed rows of x, in order, as a new device tensor.
	GatherRows(x tensor.T, rows []int32) tensor.T
	// ToHost copies a device tensor to host memory.
	ToHost(x tensor.T) tensor.T
}

// SampleRow is one draw of Sampler.Sample: the row of the logits and the
// request's sampling parameters.
type SampleRow struct {
	Row         int     // the row of the logits tensor
	Temperature float32 // 0 (or negative): greedy
	TopK        int     // <= 0: off
	TopP        float32 // 1: off; (0, 1) keeps the nucleus
	MinP        float32 // 0: off; keep p >= MinP * p_max
	Seed        uint64
	Step        uint64 // which draw of the seed: the request's output index
	// Mask, when set, is the tokens the row may draw (structured output):
	// bit id%64 of word id/64 set for each allowed id, ids past its end
	// forbidden. The other logits count as -Inf before every filter, so a
	// greedy row takes the argmax of the allowed tokens. The device copies
	// it before Sample returns.
	Mask []uint64
}

// SpecVerifier is a Sampler that also decides the nodes of speculative
// draft trees where the logits are (a GPU), so that a sampled request's
// verify step brings two numbers a node to the host, not its logits.
type SpecVerifier interface {
	// SpecVerify decides each of rows on its own, in one launch: the
	// index in Drafts of the accepted child (-1: none) and the token
	// emitted, by sample.Sampler.Verify's rule on the distribution
	// Sample draws from, the random numbers named by (Seed, Step) as
	// Sample's. The verdicts are in the order of rows.
	SpecVerify(logits tensor.T, rows []VerifyRow) ([]NodeVerdict, error)
}

// MaxVerifyDrafts is the most drafted children SpecVerify decides at one
// node; a tree with a wider node is verified on the host.
const MaxVerifyDrafts = 8

// VerifyRow is one tree node of SpecVerifier.SpecVerify: its logits row
// and sampling parameters (no Mask: constrained requests draft nothing)
// and the tokens drafted as its children, in the drafter's order, distinct,
// at most MaxVerifyDrafts. Step is the node's own: the request's output
// count plus the node's depth, so the nodes of one path never share one.
type VerifyRow struct {
	SampleRow
	Drafts []int32
}

// NodeVerdict is SpecVerify's decision at one node: Child indexes the
// row's Drafts (-1: every draft rejected) and Token is the token emitted,
// Drafts[Child] or the draw from what the rejected drafts left.
type NodeVerdict struct {
	Child, Token int32
}

// MemoryInfo is a Runtime with memory of its own to budget (a GPU): the KV
// cache gets what the weights leave of a fraction of it.
type MemoryInfo interface {
	MemInfo() (free, total int64, err error)
}

// ForwardMemory is a Runtime that can measure the device memory a
// forward's activations take without running its kernels (a CUDA dry
// run), so that the KV cache is sized to leave room for the largest
// forward the scheduler builds.
type ForwardMemory interface {
	// ActivationPeak runs forward (one whole forward, called on the
	// device's thread) with every kernel skipped and returns the most
	// device memory its allocations held at once; they are freed after.
	ActivationPeak(forward func() error) (int64, error)
}

// OpenOptions are what a registered device is opened with.
type OpenOptions struct {
	// WeightDType is how the device stores linear weights: F32, BF16 or
	// F16 (activations are float32).
	WeightDType tensor.DType
	// Ordinal is which of the host's devices to open (a tensor-parallel
	// rank opens its own GPU); 0 is the first.
	Ordinal int
	// Workers is the host pool the runtime carries (Runtime.Workers); it
	// stays the caller's to close.
	Workers Workers
	Log     *slog.Logger
}

// Opener opens a registered device.
type Opener func(OpenOptions) (Runtime, error)

var (
	openersMu sync.Mutex
	openers   = map[string]Opener{}
)

// Register makes a device available to Open under name. A device package
// that binaries link only when they want it (device/cudadev) calls it from
// init, as database/sql drivers do; registering a name twice panics.
func Register(name string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[name]; dup {
		panic("device: Register called twice for " + name)
	}
	openers[name] = open
}

// Open opens the device registered under name.
func Open(name string, opts OpenOptions) (Runtime, error) {
	openersMu.Lock()
	open, ok := openers[name]
	openersMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("this binary has no %s device; a program that embeds gosling links CUDA with a blank import of github.com/gosling-ai/gosling/device/cudadev", name)
	}
	return open(opts)
}

// Registered lists the registered device names, sorted.
func Registered() []string {
	openersMu.Lock()
	defer openersMu.Unlock()
	return slices.Sorted(maps.Keys(openers))
}

// Activations is Ops that hand out activation memory recycled at every
// forward's end (cpu.Ops): an attention backend writes its layer outputs
// there, in memory that is still in cache.
type Activations interface {
	// NewActivation is an uninitialised tensor valid until the forward ends.
	NewActivation(shape ...int) tensor.T
}
