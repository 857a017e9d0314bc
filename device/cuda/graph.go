package cuda

import (
	"errors"
	"fmt"
)

// Graph is an instantiated CUDA graph: a recorded sequence of kernels and
// copies on one stream, replayed with one launch. It replays the same device
// addresses it captured, so inputs change by writing into the captured
// buffers, never by swapping pointers.
type Graph struct {
	graph, exec uintptr
	// Nodes is the number of operations captured.
	Nodes int
	dev   *Device
}

// Capture records what fn enqueues on s into a graph and instantiates it.
// Nothing runs during capture. fn must only enqueue work on s (or streams
// joined to it by events): allocation through Device.Malloc or a synchronous
// copy fails the capture, which is why per-step buffers come from the
// caching allocator, warmed up before capture.
func (dev *Device) Capture(s Stream, fn func() error) (*Graph, error) {
	if s == 0 {
		return nil, errors.New("capture: the legacy default stream cannot be captured; use Device.Stream or NewStream")
	}
	g := &Graph{dev: dev}
	err := dev.Do(func() error {
		if err := check("cuStreamBeginCapture", dev.d.cuStreamBeginCapture(s, captureModeThreadLocal)); err != nil {
			return err
		}
		ended := false
		defer func() {
			// fn panicked (a failed collective): leave s usable anyway.
			if !ended {
				var graph uintptr
				if dev.d.cuStreamEndCapture(s, &graph) == 0 && graph != 0 {
					dev.d.cuGraphDestroy(graph)
				}
			}
		}()
		fnErr := fn()
		// End the capture whatever fn did, so s is usable again.
		ended = true
		endErr := check("cuStreamEndCapture", dev.d.cuStreamEndCapture(s, &g.graph))
		if fnErr != nil || endErr != nil {
			if g.graph != 0 {
				dev.d.cuGraphDestroy(g.graph)
			}
			return errors.Join(fnErr, endErr)
		}
		var n uint64
		if err := check("cuGraphGetNodes", dev.d.cuGraphGetNodes(g.graph, nil, &n)); err != nil {
			dev.d.cuGraphDestroy(g.graph)
			return err
		}
		g.Nodes = int(n)
		if err := check("cuGraphInstantiate", dev.d.cuGraphInstantiateWithFlags(&g.exec, g.graph, 0)); err != nil {
			dev.d.cuGraphDestroy(g.graph)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return g, nil
}

// Launch replays the graph on s.
func (g *Graph) Launch(s Stream) error {
	return g.dev.Do(func() error { return check("cuGraphLaunch", g.dev.d.cuGraphLaunch(g.exec, s)) })
}

// Destroy frees the graph.
func (g *Graph) Destroy() error {
	return g.dev.Do(func() error {
		return errors.Join(
			check("cuGraphExecDestroy", g.dev.d.cuGraphExecDestroy(g.exec)),
			check("cuGraphDestroy", g.dev.d.cuGraphDestroy(g.graph)))
	})
}
