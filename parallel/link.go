package parallel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Link is the connection between node 0 and another node once the
// rendezvous is over: framed messages of a few kinds (the engine's steps
// and setup, the CPU communicator's collectives) in both directions. One
// goroutine reads the connection and sorts the frames by kind, so a
// collective and the step it belongs to wait on their own kinds; when the
// connection ends every waiter gets the reason.
//
// A frame is: kind (1 byte), length (uint32, little-endian), payload.
type Link struct {
	Node int // the other end's --node-rank

	conn net.Conn
	wmu  sync.Mutex
	in   [numKinds]chan []byte
	dead chan struct{}
	err  error // why the link ended; set before dead closes
	once sync.Once
}

// MsgKind is what a frame carries.
type MsgKind uint8

const (
	MsgSetup MsgKind = iota // the engine's start-up exchange
	MsgStep                 // node 0 → node k: one step's batch
	MsgDone                 // node k → node 0: the step's outcome
	MsgColl                 // a collective's data (the CPU communicator)
	MsgBye                  // node 0 → node k: the engine closed
	numKinds
)

// maxFrame bounds one frame (a step of a large batch, a collective of
// logits), so a corrupt length fails instead of allocating wildly.
const maxFrame = 1 << 31

func newLink(conn net.Conn, node int) *Link {
	l := &Link{Node: node, conn: conn, dead: make(chan struct{})}
	for k := range l.in {
		l.in[k] = make(chan []byte, 64)
	}
	go l.read()
	return l
}

func (l *Link) read() {
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(l.conn, hdr[:]); err != nil {
			l.fail(err)
			return
		}
		kind, n := MsgKind(hdr[0]), binary.LittleEndian.Uint32(hdr[1:])
		if kind >= numKinds || n > maxFrame {
			l.fail(fmt.Errorf("a frame of kind %d and %d bytes: not a gosling node, or a different version", kind, n))
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(l.conn, buf); err != nil {
			l.fail(err)
			return
		}
		select {
		case l.in[kind] <- buf:
		case <-l.dead:
			return
		}
	}
}

func (l *Link) fail(err error) {
	l.once.Do(func() {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			err = fmt.Errorf("the connection to node %d closed", l.Node)
		} else {
			err = fmt.Errorf("the connection to node %d: %w", l.Node, err)
		}
		l.err = err
		close(l.dead)
		l.conn.Close()
	})
}

// Send writes one frame.
func (l *Link) Send(kind MsgKind, payload []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	select {
	case <-l.dead:
		return l.err
	default:
	}
	hdr := binary.LittleEndian.AppendUint32([]byte{byte(kind)}, uint32(len(payload)))
	if _, err := (&net.Buffers{hdr, payload}).WriteTo(l.conn); err != nil {
		l.fail(err)
		return l.err
	}
	return nil
}

// Recv waits for the next frame of kind; frames that arrived before the
// link ended are still delivered.
func (l *Link) Recv(kind MsgKind) ([]byte, error) {
	select {
	case b := <-l.in[kind]:
		return b, nil
	case <-l.dead:
		select {
		case b := <-l.in[kind]:
			return b, nil
		default:
			return nil, l.err
		}
	}
}

// Dead is closed when the link has ended (Err says why).
func (l *Link) Dead() <-chan struct{} { return l.dead }

// Err is why the link ended, nil while it is up.
func (l *Link) Err() error {
	select {
	case <-l.dead:
		return l.err
	default:
		return nil
	}
}

// Close ends the link; the other end's waiters get "closed".
func (l *Link) Close() error {
	l.fail(net.ErrClosed)
	return nil
}

// ServeLinks is node 0's side of the rendezvous at addr (ServeRendezvous)
// that keeps each node's connection as a Link: links[k-1] is node k's.
func ServeLinks(addr string, nodes int, payload []byte, timeout time.Duration) ([]*Link, error) {
	conns, err := serveNodes(addr, nodes, payload, timeout)
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	links := make([]*Link, 0, nodes-1)
	for k, c := range conns[1:] {
		links = append(links, newLink(c, k+1))
	}
	return links, nil
}

// JoinLink is node k's side (JoinRendezvous) keeping the connection to
// node 0 as a Link; it returns the payload node 0 handed out.
func JoinLink(addr string, node, nodes int, timeout time.Duration) (*Link, []byte, error) {
	conn, payload, err := joinNode(addr, node, nodes, timeout)
	if err != nil {
		return nil, nil, err
	}
	return newLink(conn, 0), payload, nil
}
