package cuda

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gosling-ai/gosling/device"
)

// CUDA graphs for whole forwards (decode steps): see record.go for why a
// dry run's signature decides whether a captured graph may be replayed.
//
// RunGraph runs one forward three ways:
//
//  1. dry run: the forward's host code runs with every stream operation
//     signed and skipped; its inputs land in the graph staging (pinned
//     memory at the same addresses every time) and its activations in the
//     arena (the same addresses every time: same sizes, same order);
//  2. replay: a graph captured under key with the same signature is
//     launched; it copies the new inputs from the staging and runs the
//     same kernels on the same buffers;
//  3. capture: otherwise the forward runs once more under stream capture,
//     the graph is instantiated (replacing the least recently used one of
//     the key beyond GraphsPerKey) and launched.
//
// A forward that does something a graph cannot hold (a read-back to the
// host, a synchronisation, an event) runs eagerly instead; so does a
// capture the driver refuses. Either way the caller gets a correct
// forward; GraphRun says which path ran.
//
// Contract for forward: it must be one whole forward on this ModelOps
// (BeginForward first), enqueue everything on the ModelOps stream, and
// take its per-step inputs from host memory through ModelOps uploads.
// Metadata uploaded by others (attention plans) must be uploaded before
// RunGraph, into buffers whose addresses do not change.
//
// Tensors of the forward stay valid after RunGraph until the next
// BeginForward, as with an eager forward.

// GraphsPerKey bounds the graphs kept per key: a decode batch size sees a
// new signature when its attention split changes (longer sequences), and
// an older one may come back (a long request finishes).
const GraphsPerKey = 4

// GraphPath, GraphRun and their values are device's, so that ModelOps
// serves the device.Graphs capability as it is.
type (
	GraphPath = device.GraphPath
	GraphRun  = device.GraphRun
)

const (
	GraphReplayed = device.GraphReplayed
	GraphCaptured = device.GraphCaptured
	GraphEager    = device.GraphEager
)

type graphEntry struct {
	sig     uint64
	group   uint64 // the group capture it came from (RunGroupGraph), 0 outside a group
	graph   *Graph
	lastUse uint64
}

type graphState struct {
	graphs map[int][]*graphEntry
	clock  uint64
	// groupCaptures numbers the captures a tensor-parallel group agreed
	// on (RunGroupGraph), identically on every rank.
	groupCaptures uint64
	staging       staging // swapped in as ModelOps.staging while recording
	fence         Event   // recorded after the last graph launch
	fenced        bool
	active        bool // a recorded forward is running (BeginForward rewinds instead of flipping)
}

// RunGraph runs forward (see above) under key (the padded batch size).
// Call it inside Run or from any goroutine.
func (o *ModelOps) RunGraph(key int, forward func() error) (GraphRun, error) {
	return o.RunGroupGraph(key, forward, nil)
}

// RunGroupGraph is RunGraph for one rank of a tensor-parallel group
// (device.GroupGraphs): agree makes the group take one path. After the
// dry run each rank votes eager (its forward cannot be a graph) or the
// group capture its signature matched; the group replays only when every
// rank matched the same capture, runs eagerly when any rank must, and
// captures otherwise (a rank whose graph matched captures again, so that
// every rank's new graph comes from the same collective capture). After
// capturing, the ranks vote again and launch only if every capture
// succeeded. With agree nil it is RunGraph.
func (o *ModelOps) RunGroupGraph(key int, forward func() error, agree device.GraphAgree) (run GraphRun, err error) {
	err = o.dev.Do(func() error {
		var err error
		run, err = o.runGraph(key, forward, agree)
		return err
	})
	return run, err
}

func (o *ModelOps) runGraph(key int, forward func() error, agree device.GraphAgree) (GraphRun, error) {
	g := &o.graph
	if g.graphs == nil {
		g.graphs = map[int][]*graphEntry{}
	}
	// Uploads after the forward (gathering logits rows) use the ordinary
	// staging: start its next half, as an eager BeginForward would.
	if err := o.staging.flip(); err != nil {
		return GraphRun{}, err
	}
	if g.fenced { // the last graph's copies have read the staging
		if err := o.dev.EventSync(g.fence); err != nil {
			return GraphRun{}, err
		}
		g.fenced = false
	}
	sig, reason, err := o.recorded(recordDry, forward)
	if err != nil {
		return GraphRun{}, err
	}
	var hit *graphEntry
	if reason == "" {
		for _, e := range g.graphs[key] {
			if e.sig == sig {
				hit = e
				break
			}
		}
	}
	same := hit // an entry the capture below replaces
	if agree != nil {
		mine := device.GraphVote{Eager: reason != ""}
		if hit != nil {
			mine.Graph = hit.group
		}
		v, err := agree(mine)
		if err != nil {
			return GraphRun{}, err
		}
		switch {
		case v.Hold:
			return GraphRun{Path: GraphEager, Held: true, Reason: "a rank of the tensor-parallel group holds this step off graphs"}, o.eager(forward)
		case v.Eager && reason == "":
			reason = "another rank of the tensor-parallel group cannot run this step as a graph"
		}
		if v.Graph == 0 {
			hit = nil
		}
	}
	if reason != "" {
		return GraphRun{Path: GraphEager, Reason: reason}, o.eager(forward)
	}
	g.clock++
	if hit != nil {
		hit.lastUse = g.clock
		return GraphRun{Path: GraphReplayed, Nodes: hit.graph.Nodes}, o.launchGraph(hit.graph)
	}
	start := time.Now()
	var capSig uint64
	var capReason string
	graph, err := o.dev.Capture(o.stream, func() error {
		var err error
		capSig, capReason, err = o.recorded(recordCapture, forward)
		return err
	})
	if err == nil && (capReason != "" || capSig != sig) {
		graph.Destroy()
		if capReason != "" {
			graph, err = nil, fmt.Errorf("the capture cannot be a graph: %s", capReason)
		} else {
			graph, err = nil, errors.New("the captured forward differs from its dry run (its operations, buffers or arguments)")
		}
	}
	var group uint64
	if agree != nil {
		g.groupCaptures++ // on every rank alike: each counts the captures the group agreed on
		group = g.groupCaptures
		v, aerr := agree(device.GraphVote{Eager: err != nil})
		if aerr != nil {
			if graph != nil {
				graph.Destroy()
			}
			return GraphRun{}, aerr
		}
		if v.Eager && err == nil {
			graph.Destroy()
			graph, err = nil, errors.New("another rank of the tensor-parallel group could not capture this step")
		}
	}
	if err != nil {
		// The capture enqueued nothing; run the forward for real.
		return GraphRun{Path: GraphEager, Reason: err.Error()}, o.eager(forward)
	}
	entry := &graphEntry{sig: sig, group: group, graph: graph, lastUse: g.clock}
	entries := g.graphs[key]
	if i := slices.Index(entries, same); same != nil && i >= 0 {
		same.graph.Destroy()
		entries[i] = entry
	} else {
		if len(entries) >= GraphsPerKey {
			oldest := 0
			for i, e := range entries {
				if e.lastUse < entries[oldest].lastUse {
					oldest = i
				}
			}
			entries[oldest].graph.Destroy()
			entries = append(entries[:oldest], entries[oldest+1:]...)
		}
		entries = append(entries, entry)
	}
	g.graphs[key] = entries
	return GraphRun{Path: GraphCaptured, Nodes: graph.Nodes, Capture: time.Since(start)}, o.launchGraph(graph)
}

// recorded runs forward with the recorder in mode and the graph staging in
// place, returning the signature, or the reason it cannot be a graph.
func (o *ModelOps) recorded(mode recordMode, forward func() error) (sig uint64, reason string, err error) {
	g := &o.graph
	if g.staging.be == nil {
		g.staging = staging{be: o.stagingDev}
	}
	o.staging, g.staging = g.staging, o.staging
	g.active = true
	o.dev.rec.begin(mode)
	defer func() {
		var recErr error
		sig, _, recErr = o.dev.rec.end()
		if recErr != nil {
			reason = recErr.Error()
		}
		g.active = false
		o.staging, g.staging = g.staging, o.staging
	}()
	err = o.catch(forward)
	return
}

// eager runs forward without recording.
func (o *ModelOps) eager(forward func() error) error { return o.catch(forward) }

// catch runs forward, turning an *OpError panic into its error.
func (o *ModelOps) catch(forward func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			oe, ok := p.(*OpError)
			if !ok {
				panic(p)
			}
			err = oe
		}
	}()
	return forward()
}

func (o *ModelOps) launchGraph(graph *Graph) error {
	g := &o.graph
	if err := graph.Launch(o.stream); err != nil {
		return err
	}
	if g.fence == 0 {
		e, err := o.dev.NewEvent(false)
		if err != nil {
			return err
		}
		g.fence = e
	}
	if err := o.dev.Record(g.fence, o.stream); err != nil {
		return err
	}
	g.fenced = true
	return nil
}

// Graphs is the number of graphs held.
func (o *ModelOps) Graphs() int {
	n := 0
	o.dev.Do(func() error {
		for _, es := range o.graph.graphs {
			n += len(es)
		}
		return nil
	})
	return n
}

// ReleaseGraphs destroys the graphs held, once the stream is idle
// (device.GroupGraphs).
func (o *ModelOps) ReleaseGraphs() error {
	return o.dev.Do(func() error { return errors.Join(o.dev.StreamSync(o.stream), o.destroyGraphs()) })
}

// destroyGraphs destroys the graphs held (device thread, stream idle).
func (o *ModelOps) destroyGraphs() error {
	g := &o.graph
	var errs []error
	for _, es := range g.graphs {
		for _, e := range es {
			errs = append(errs, e.graph.Destroy())
		}
	}
	g.graphs = nil
	return errors.Join(errs...)
}

// closeGraphs destroys the graphs and the graph staging (device thread,
// stream idle).
func (o *ModelOps) closeGraphs() error {
	g := &o.graph
	errs := []error{o.destroyGraphs()}
	if g.fence != 0 {
		errs = append(errs, o.dev.DestroyEvent(g.fence))
		g.fence, g.fenced = 0, false
	}
	if g.staging.be != nil {
		errs = append(errs, g.staging.close())
	}
	return errors.Join(errs...)
}
