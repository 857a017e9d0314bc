package parallel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The rendezvous of ranks across hosts: node 0 listens at --dist-init-addr
// and hands every other node the bytes all ranks must share before their
// communicator exists (NCCL's unique id), as SGLang's rank 0 does over its
// TCP store. The exchange is one request and one reply per node:
//
//	node k → node 0: magic, k (uint32), nodes (uint32)
//	node 0 → node k: length (uint32), payload
//
// so a node of another deployment (another --nnodes, another program) is
// told so instead of joining the wrong group.
const rendezvousMagic = "gosling-rendezvous-1"

// ServeRendezvous is node 0's side: it accepts the other nodes-1 nodes at
// addr, each once, and sends each the payload. It fails when they have not
// all arrived within timeout, naming the missing ones.
func ServeRendezvous(addr string, nodes int, payload []byte, timeout time.Duration) error {
	conns, err := serveNodes(addr, nodes, payload, timeout)
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	return err
}

// serveNodes is ServeRendezvous keeping the connections: conns[k] is
// node k's (conns[0] nil). On failure the joined ones are returned too,
// for the caller to close.
func serveNodes(addr string, nodes int, payload []byte, timeout time.Duration) (conns []net.Conn, err error) {
	conns = make([]net.Conn, nodes)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return conns, fmt.Errorf("--dist-init-addr %s: node 0 cannot listen there: %v", addr, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	ln.(*net.TCPListener).SetDeadline(deadline)
	joined := make([]bool, nodes)
	joined[0] = true
	for left := nodes - 1; left > 0; {
		conn, err := ln.Accept()
		if err != nil {
			var missing []int
			for k, ok := range joined {
				if !ok {
					missing = append(missing, k)
				}
			}
			return conns, fmt.Errorf("--dist-init-addr %s: nodes %v did not join within %v: %v", addr, missing, timeout, err)
		}
		k, err := serveNode(conn, nodes, joined, payload, deadline)
		if errors.Is(err, errProbe) {
			conn.Close()
			continue
		}
		if err != nil {
			conn.Close()
			return conns, err
		}
		conn.SetDeadline(time.Time{})
		conns[k] = conn
		joined[k] = true
		left--
	}
	return conns, nil
}

// errProbe is a connection closed before it said anything: a node
// checking that node 0 listens (Launch.Validate), not one joining.
var errProbe = errors.New("rendezvous: a probe")

func serveNode(conn net.Conn, nodes int, joined []bool, payload []byte, deadline time.Time) (int, error) {
	conn.SetDeadline(deadline)
	hello := make([]byte, len(rendezvousMagic)+8)
	if n, err := io.ReadFull(conn, hello); n == 0 && errors.Is(err, io.EOF) {
		return 0, errProbe
	} else if err != nil || string(hello[:len(rendezvousMagic)]) != rendezvousMagic {
		return 0, fmt.Errorf("rendezvous: %s is not a gosling node (%v)", conn.RemoteAddr(), err)
	}
	k := int(binary.LittleEndian.Uint32(hello[len(rendezvousMagic):]))
	theirs := int(binary.LittleEndian.Uint32(hello[len(rendezvousMagic)+4:]))
	switch {
	case theirs != nodes:
		return 0, fmt.Errorf("rendezvous: node %d at %s was started with --nnodes %d, node 0 with %d", k, conn.RemoteAddr(), theirs, nodes)
	case k <= 0 || k >= nodes:
		return 0, fmt.Errorf("rendezvous: %s claims --node-rank %d, outside [1, %d)", conn.RemoteAddr(), k, nodes)
	case joined[k]:
		return 0, fmt.Errorf("rendezvous: two hosts were started with --node-rank %d (the second from %s)", k, conn.RemoteAddr())
	}
	reply := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	if _, err := conn.Write(append(reply, payload...)); err != nil {
		return 0, fmt.Errorf("rendezvous: sending node %d the id: %v", k, err)
	}
	return k, nil
}

// JoinRendezvous is node k's side (k >= 1): it dials node 0 at addr,
// retrying until timeout (the hosts start in any order), and returns the
// payload node 0 hands out.
func JoinRendezvous(addr string, node, nodes int, timeout time.Duration) ([]byte, error) {
	conn, payload, err := joinNode(addr, node, nodes, timeout)
	if conn != nil {
		conn.Close()
	}
	return payload, err
}

// joinNode is JoinRendezvous keeping the connection to node 0 (nil on
// failure).
func joinNode(addr string, node, nodes int, timeout time.Duration) (net.Conn, []byte, error) {
	deadline := time.Now().Add(timeout)
	var conn net.Conn
	for {
		var err error
		conn, err = net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("--dist-init-addr %s: node 0 did not answer node %d within %v: %v", addr, node, timeout, err)
		}
		time.Sleep(min(200*time.Millisecond, time.Until(deadline)))
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	conn.SetDeadline(deadline)
	hello := binary.LittleEndian.AppendUint32([]byte(rendezvousMagic), uint32(node))
	hello = binary.LittleEndian.AppendUint32(hello, uint32(nodes))
	if _, err := conn.Write(hello); err != nil {
		return nil, nil, fmt.Errorf("--dist-init-addr %s: %v", addr, err)
	}
	var n [4]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("--dist-init-addr %s: node 0 refused node %d (see node 0's log: another --nnodes, or --node-rank %d twice)", addr, node, node)
		}
		return nil, nil, fmt.Errorf("--dist-init-addr %s: %v", addr, err)
	}
	payload := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(conn, payload); err != nil {
		return nil, nil, fmt.Errorf("--dist-init-addr %s: %v", addr, err)
	}
	conn.SetDeadline(time.Time{})
	ok = true
	return conn, payload, nil
}
