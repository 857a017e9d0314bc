package parallel

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gosling-ai/gosling/model"
)

// Launch is how the ranks of one model are laid out, in SGLang's flags:
// TPSize ranks over NNodes hosts (TPSize/NNodes each, one GPU per rank),
// this process on host NodeRank, and rank 0's rendezvous at DistInitAddr
// (HOST:PORT), where it hands out the NCCL id.
type Launch struct {
	TPSize       int
	NNodes       int
	NodeRank     int
	DistInitAddr string
}

// Single reports whether the launch is the default: one rank, one host.
func (l Launch) Single() bool {
	return l.TPSize == 1 && l.NNodes == 1 && l.NodeRank == 0 && l.DistInitAddr == ""
}

// Validate checks the flags against each other and against the model, and
// that the rendezvous is usable: node 0 must be able to listen on
// DistInitAddr, every other node to reach it within timeout (node 0 may
// start later). Messages name the flags.
func (l Launch) Validate(cfg *model.Config, timeout time.Duration) error {
	switch {
	case l.TPSize < 1:
		return fmt.Errorf("--tp-size must be at least 1, got %d", l.TPSize)
	case l.NNodes < 1:
		return fmt.Errorf("--nnodes must be at least 1, got %d", l.NNodes)
	case l.NodeRank < 0 || l.NodeRank >= l.NNodes:
		return fmt.Errorf("--node-rank %d must lie in [0, --nnodes %d): hosts are numbered from 0", l.NodeRank, l.NNodes)
	case l.TPSize%l.NNodes != 0:
		return fmt.Errorf("--tp-size %d does not divide evenly over --nnodes %d (every host runs the same number of ranks)", l.TPSize, l.NNodes)
	case l.NNodes > 1 && l.DistInitAddr == "":
		return fmt.Errorf("--nnodes %d needs --dist-init-addr HOST:PORT, where node 0 hands out the communicator id", l.NNodes)
	case l.NNodes == 1 && l.DistInitAddr != "":
		return fmt.Errorf("--dist-init-addr is for ranks on several hosts; with --nnodes 1 the ranks of one host meet without it")
	}
	if _, err := NewPlan(cfg, l.TPSize); err != nil {
		return fmt.Errorf("--tp-size %d: %w", l.TPSize, err)
	}
	if l.DistInitAddr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(l.DistInitAddr)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || p < 1 || p > 65535 || host == "" {
		return fmt.Errorf("--dist-init-addr %q: want HOST:PORT with a port in 1-65535", l.DistInitAddr)
	}
	if l.NodeRank == 0 {
		ln, err := net.Listen("tcp", l.DistInitAddr)
		if err != nil {
			return fmt.Errorf("--dist-init-addr %s: node 0 cannot listen there: %v", l.DistInitAddr, err)
		}
		return ln.Close()
	}
	// Hosts start in any order: node 0 may not listen yet.
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", l.DistInitAddr, time.Until(deadline))
		if err == nil {
			return conn.Close() // node 0 takes a connection that says nothing for a probe
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("--dist-init-addr %s: node 0 is unreachable from node %d within %v (start node 0 too, and check the address and firewall): %v", l.DistInitAddr, l.NodeRank, timeout, err)
		}
		time.Sleep(min(200*time.Millisecond, time.Until(deadline)))
	}
}
