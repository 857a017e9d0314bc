package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/attention/registry"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/engine/runner"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/parallel"
)

// Tensor parallelism across processes (Config.NNodes > 1): node k runs
// ranks k·per .. (k+1)·per-1 (per = TPSize/NNodes) on its own devices,
// node 0 the scheduler and the server besides. Node 0 listens at
// DistInitAddr; each other node connects there (parallel.ServeLinks,
// JoinLink) and the connection stays open as the node's link:
//
//	node 0 → node k   hello: the NCCL id, the device, the ranks, the model's shape
//	node k → node 0   its KV budget once its weights are loaded (a GPU's free memory)
//	node 0 → node k   the resolved settings: KV layout and slots, attention, graphs
//	node 0 → node k   each step: the batch, with its requests' table rows and
//	                  window pages (node k keeps a mirror of rank 0's table)
//	node k → node 0   the step's outcome: "" or the error
//	node 0 → node k   bye, when the engine closes
//
// The collectives go over NCCL between GPUs (its own connections), or,
// for CPU ranks (one per process), through the links themselves
// (parallel.NewStarHub, NewStarRank). A node whose link breaks, or whose
// step fails, fails the group: node 0's engine stops (RankError), and a
// node whose link to node 0 breaks ends RunNode with the reason.

// defaultDistTimeout is how long the nodes wait for each other unless
// Config.DistTimeout says: they may be started by hand, one host after
// another.
const defaultDistTimeout = 10 * time.Minute

// nodeHello is what node 0 hands every node at the rendezvous.
type nodeHello struct {
	ID     []byte // the NCCL unique id; nil for CPU ranks
	Device string
	TPSize int
	Model  modelShape
}

// modelShape is what two nodes' checkpoints must agree on.
type modelShape struct {
	Architecture                                     string
	Layers, Hidden, Heads, KVHeads, Inter, Vocab, HD int
}

func shapeOf(c *model.Config) modelShape {
	return modelShape{c.Architecture, c.NumLayers, c.HiddenSize, c.NumHeads, c.NumKVHeads, c.IntermediateSize, c.VocabSize, c.HeadDim}
}

// checkNodes checks the multi-node settings of cfg (their network side is
// checked when the nodes meet).
func checkNodes(cfg *Config) error {
	switch {
	case cfg.NNodes <= 1:
		if cfg.NodeRank != 0 || cfg.DistInitAddr != "" {
			return errors.New("--node-rank and --dist-init-addr are for ranks on several hosts (--nnodes > 1)")
		}
		return nil
	case cfg.NodeRank < 0 || cfg.NodeRank >= cfg.NNodes:
		return fmt.Errorf("--node-rank %d must lie in [0, --nnodes %d)", cfg.NodeRank, cfg.NNodes)
	case cfg.TPSize%cfg.NNodes != 0:
		return fmt.Errorf("--tp-size %d does not divide evenly over --nnodes %d", cfg.TPSize, cfg.NNodes)
	case cfg.DistInitAddr == "":
		return fmt.Errorf("--nnodes %d needs --dist-init-addr HOST:PORT, where node 0 meets the others", cfg.NNodes)
	case cfg.SpeculativeAlgorithm != "":
		return errors.New("--speculative-algorithm across hosts is not supported yet: the accepted drafts' KV moves are not sent to the other nodes")
	}
	return nil
}

// joinNodes meets the other nodes at DistInitAddr and makes this
// process's communicators: NCCL's over every node's GPUs, or, for CPU
// ranks, the star over the links.
func (e *Engine) joinNodes(rts []device.Runtime) ([]parallel.Communicator, error) {
	cfg := &e.cfg
	name := rts[0].Name()
	onCPU := name == "cpu"
	if onCPU && len(rts) != 1 {
		return nil, fmt.Errorf("CPU ranks across processes run one per process: use --tp-size %d with --nnodes %d", cfg.NNodes, cfg.NNodes)
	}
	var j parallel.Joiner
	if !onCPU {
		var err error
		if j, err = parallel.JoinerFor(name); err != nil {
			return nil, err
		}
	}
	shape := shapeOf(&e.checkpoint.Config)
	var hello nodeHello
	if cfg.NodeRank == 0 {
		hello = nodeHello{Device: name, TPSize: cfg.TPSize, Model: shape}
		if !onCPU {
			var err error
			if hello.ID, err = j.NewID(); err != nil {
				return nil, err
			}
		}
		payload, _ := json.Marshal(hello)
		e.log.Info("waiting for the other nodes", "dist_init_addr", cfg.DistInitAddr, "nnodes", cfg.NNodes)
		links, err := parallel.ServeLinks(cfg.DistInitAddr, cfg.NNodes, payload, cmp.Or(cfg.DistTimeout, defaultDistTimeout))
		if err != nil {
			return nil, err
		}
		e.tp.links = links
		if onCPU {
			return []parallel.Communicator{parallel.NewStarHub(links)}, nil
		}
	} else {
		link, payload, err := parallel.JoinLink(cfg.DistInitAddr, cfg.NodeRank, cfg.NNodes, cmp.Or(cfg.DistTimeout, defaultDistTimeout))
		if err != nil {
			return nil, err
		}
		e.tp.up = link
		if err := json.Unmarshal(payload, &hello); err != nil {
			return nil, fmt.Errorf("node 0's hello: %w", err)
		}
		switch {
		case hello.Device != name:
			return nil, fmt.Errorf("node 0 runs its ranks on %s, this node on %s", hello.Device, name)
		case hello.TPSize != cfg.TPSize:
			return nil, fmt.Errorf("node 0 was started with --tp-size %d, this node with %d", hello.TPSize, cfg.TPSize)
		case hello.Model != shape:
			return nil, fmt.Errorf("node 0 serves another model: %+v, this node %+v", hello.Model, shape)
		}
		if onCPU {
			return []parallel.Communicator{parallel.NewStarRank(e.tp.first, cfg.TPSize, link)}, nil
		}
	}
	return j.Join(rts, hello.ID, e.tp.first, cfg.TPSize)
}

// recvBudget is node k's KV budget in bytes (<= 0: none).
func recvBudget(l *parallel.Link) (int64, error) {
	b, err := l.Recv(parallel.MsgSetup)
	if err != nil {
		return 0, fmt.Errorf("node %d's KV budget: %w", l.Node, err)
	}
	var budget int64
	if err := json.Unmarshal(b, &budget); err != nil {
		return 0, fmt.Errorf("node %d's KV budget: %w", l.Node, err)
	}
	return budget, nil
}

// nodeSetup is what node 0 resolved and every node must use alike.
type nodeSetup struct {
	Config         Config // Logger dropped
	Spec           kvcache.Spec
	Slots          int
	KScale, VScale []float32
	GraphSizes     []int // nil: decode steps run without graphs
}

// setupNodes sends every node the resolved settings (node 0, after its
// own cache and attention exist).
func (e *Engine) setupNodes(plan *attention.Resolution) error {
	if len(e.tp.links) == 0 {
		return nil
	}
	s := nodeSetup{Config: e.cfg, Spec: e.kv.Pool.Spec, Slots: e.kv.Pool.NumSlots, KScale: e.kv.Pool.KScale, VScale: e.kv.Pool.VScale}
	s.Config.Logger = nil
	if g := e.rn.Graphs(); g != nil {
		s.GraphSizes = g.Sizes()
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	for _, l := range e.tp.links {
		if err := l.Send(parallel.MsgSetup, data); err != nil {
			return err
		}
	}
	return nil
}

// watchNodes stops the engine when a node's link breaks between steps
// (a step in flight notices by itself): requests would only fail later.
func (e *Engine) watchNodes() {
	if e.tp == nil {
		return
	}
	for _, l := range e.tp.links {
		go func() {
			select {
			case <-l.Dead():
			case <-e.stop:
				return
			}
			select {
			case e.control <- func() {
				if e.tp.err == nil {
					e.tp.err = &RankError{Err: fmt.Errorf("node %d: %w", l.Node, l.Err())}
					e.tp.abortAll(e.log)
				}
			}:
			case <-e.stop:
			case <-e.done:
			}
		}()
	}
}

// stepMsg is one step's batch as it travels to the other nodes.
type stepMsg struct {
	Mode                                     forward.Mode
	ReqRows, PrefixLens, ExtendLens          []int32
	InputIDs, Positions, OutSlots, LogitRows []int32
	CustomMask                               []bool
	MaskStarts, EmbedRows, MRopePositions    []int32
	Spans                                    []forward.Span
	EmbedData                                []float32
	Rows                                     [][]int32 // per request: its table row's slots [0, SeqLen)
	Pages, Window                            []int32   // the requests' pages and their window pages
}

// sendStep hands b to every other node, and returns where their outcomes
// arrive: a node that fails aborts the group at once, so that no rank here
// waits in a collective for it.
func (t *tpGroup) sendStep(b *forward.Batch) <-chan error {
	out := make(chan error, len(t.links))
	if len(t.links) == 0 {
		return out
	}
	m := stepMsg{Mode: b.Mode, ReqRows: b.ReqRows, PrefixLens: b.PrefixLens, ExtendLens: b.ExtendLens,
		InputIDs: b.InputIDs, Positions: b.Positions, OutSlots: b.OutSlots, LogitRows: b.LogitRows,
		CustomMask: b.CustomMask, MaskStarts: b.MaskStarts, EmbedRows: b.EmbedRows, MRopePositions: b.MRopePositions,
		Spans: b.Spans, EmbedData: b.EmbedData}
	ps := b.KV.PageSize()
	for i, row := range b.ReqRows {
		slots := b.KV.Table.Row(int(row))[:b.SeqLen(i)]
		m.Rows = append(m.Rows, slots)
		if b.KV.SWA != nil {
			for at := 0; at < len(slots); at += ps {
				m.Pages = append(m.Pages, slots[at]/int32(ps))
			}
		}
	}
	m.Window = b.KV.WindowPages(m.Pages)
	var buf bytes.Buffer
	err := gob.NewEncoder(&buf).Encode(&m)
	for _, l := range t.links {
		if err == nil {
			err = l.Send(parallel.MsgStep, buf.Bytes())
		}
		go func() {
			err := err
			if err == nil {
				err = awaitDone(l)
			}
			if err != nil {
				err = fmt.Errorf("node %d: %w", l.Node, err)
				t.abortAll(t.log)
			}
			out <- err
		}()
	}
	return out
}

// awaitDone is a node's outcome of the step in flight.
func awaitDone(l *parallel.Link) error {
	b, err := l.Recv(parallel.MsgDone)
	if err != nil {
		return err
	}
	if len(b) > 0 {
		return errors.New(string(b))
	}
	return nil
}

// RunNode runs this host's ranks of a model served across hosts
// (cfg.NNodes > 1, cfg.NodeRank > 0): it meets node 0 at
// cfg.DistInitAddr, loads its ranks' shards, and runs every step node 0
// sends until node 0 closes (nil), the link breaks or a step fails (the
// reason), or ctx ends.
func RunNode(ctx context.Context, cfg Config) error {
	if cfg.NNodes <= 1 || cfg.NodeRank <= 0 {
		return fmt.Errorf("RunNode is for nodes 1.. of --nnodes > 1 (node 0 serves through engine.New), not --node-rank %d of --nnodes %d", cfg.NodeRank, cfg.NNodes)
	}
	cfg, sc, err := checkConfig(cfg)
	if err != nil {
		return err
	}
	if sc.Enabled() {
		return errors.New("--speculative-algorithm across hosts is not supported yet")
	}
	ck, err := openCheckpoint(cfg)
	if err != nil {
		return err
	}
	defer ck.Close()
	e := &Engine{cfg: cfg, checkpoint: ck, log: cfg.Logger.With("node", cfg.NodeRank)}
	defer e.release()
	if err := e.initNode(); err != nil {
		return err
	}
	e.log.Info("serving ranks for node 0", "dist_init_addr", cfg.DistInitAddr, "ranks", fmt.Sprintf("%d-%d", e.tp.first, e.tp.first+len(e.tp.peers)))
	stop := context.AfterFunc(ctx, func() { e.tp.up.Close() })
	defer stop()
	for {
		data, err := e.tp.up.Recv(parallel.MsgStep)
		if err != nil {
			if e.upBye() {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("node %d: %w", cfg.NodeRank, err)
		}
		ferr := e.nodeStep(data)
		msg := ""
		if ferr != nil {
			msg = ferr.Error()
		}
		if err := e.tp.up.Send(parallel.MsgDone, []byte(msg)); err != nil && ferr == nil {
			ferr = err
		}
		if ferr != nil {
			return fmt.Errorf("node %d: %w", cfg.NodeRank, ferr)
		}
	}
}

// upBye reports whether node 0 said bye (it closed its engine).
func (e *Engine) upBye() bool {
	_, err := e.tp.up.Recv(parallel.MsgBye)
	return err == nil
}

// initNode is engine.init for a node other than 0: its ranks, its budget
// to node 0, node 0's settings, a cache mirroring rank 0's, attention.
func (e *Engine) initNode() error {
	cfg := &e.cfg
	if err := e.loadModel(); err != nil {
		return err
	}
	m := e.model
	budget := int64(-1)
	var err error
	if mi, ok := e.rt.(device.MemoryInfo); ok {
		if budget, err = e.kvBytes(mi, 0); err != nil {
			return err
		}
	}
	data, _ := json.Marshal(budget)
	if err := e.tp.up.Send(parallel.MsgSetup, data); err != nil {
		return err
	}
	if data, err = e.tp.up.Recv(parallel.MsgSetup); err != nil {
		return fmt.Errorf("node 0's settings: %w", err)
	}
	var s nodeSetup
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("node 0's settings: %w", err)
	}
	mine := *cfg
	*cfg = s.Config
	cfg.ModelPath, cfg.TokenizerPath, cfg.Logger, cfg.NodeRank, cfg.Threads = mine.ModelPath, mine.TokenizerPath, mine.Logger, mine.NodeRank, mine.Threads
	if e.kv, err = e.newKVCache(s.Spec); err != nil {
		return err
	}
	if e.kv.Pool.NumSlots != s.Slots {
		return fmt.Errorf("node 0's KV cache has %d slots, this node's %d", s.Slots, e.kv.Pool.NumSlots)
	}
	copy(e.kv.Pool.KScale, s.KScale)
	copy(e.kv.Pool.VScale, s.VScale)
	plan, err := registry.Resolve(attention.Choice{Prefill: cfg.PrefillBackend, Decode: cfg.DecodeBackend,
		SpeculativeMode: cfg.SpeculativeAttentionMode, PageSize: cfg.PageSize, PageSizeSet: true, KVDType: cfg.KVCacheDType},
		attentionNeed(cfg.Device, cfg.PageSize, m.AttentionLayers(), false))
	if err != nil {
		return err
	}
	opts := attention.Options{Device: cfg.Device, KV: e.kv, Layers: m.AttentionLayers(), Runtime: e.rt}
	if a, ok := e.rt.Ops().(device.Activations); ok {
		opts.Output = a.NewActivation
	}
	if e.attn, err = plan.Build(opts); err != nil {
		return err
	}
	e.newRunner()
	if s.GraphSizes != nil {
		g, ok := e.rt.(device.Graphs)
		if !ok {
			return fmt.Errorf("node 0 runs CUDA graphs; this node's %s runtime has none", e.rt.Name())
		}
		e.rn.SetGraphs(runner.NewGraphs(g, s.GraphSizes))
	}
	return e.initPeers(plan)
}

// nodeStep runs one step node 0 sent on this node's ranks.
func (e *Engine) nodeStep(data []byte) error {
	var m stepMsg
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return fmt.Errorf("a step from node 0: %w", err)
	}
	if len(m.Rows) != len(m.ReqRows) {
		return fmt.Errorf("a step from node 0: %d table rows for %d requests", len(m.Rows), len(m.ReqRows))
	}
	for i, row := range m.ReqRows {
		if int(row) < 0 || int(row) >= e.kv.Table.PadRow() || len(m.Rows[i]) > e.kv.Table.MaxContext() {
			return fmt.Errorf("a step from node 0: table row %d of %d slots outside this node's table", row, len(m.Rows[i]))
		}
		copy(e.kv.Table.Row(int(row)), m.Rows[i])
	}
	if err := e.kv.SetWindowPages(m.Pages, m.Window); err != nil {
		return err
	}
	b := &forward.Batch{Mode: m.Mode, ReqRows: m.ReqRows, PrefixLens: m.PrefixLens, ExtendLens: m.ExtendLens,
		InputIDs: m.InputIDs, Positions: m.Positions, OutSlots: m.OutSlots, LogitRows: m.LogitRows,
		CustomMask: m.CustomMask, MaskStarts: m.MaskStarts, EmbedRows: m.EmbedRows, MRopePositions: m.MRopePositions,
		Spans: m.Spans, EmbedData: m.EmbedData, KV: e.kv}
	_, err := e.tp.Run(b, e.rn.Forward)
	if re, ok := err.(*RankError); ok {
		err = re.Err // node 0 adds what it means for the group
	}
	return err
}
