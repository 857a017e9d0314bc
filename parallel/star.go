package parallel

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gosling-ai/gosling/tensor"
)

// NewStarHub and NewStarRank make the communicator of CPU ranks that are
// one process each (--nnodes N with --tp-size N on the CPU), joined over
// the nodes' Links with rank 0 as the hub: every rank sends its buffer to
// rank 0, which combines them in rank order and sends the result back.
// The sums are float32 in rank order, rounded once to the buffer's dtype,
// exactly as the in-process communicator adds, so N processes compute the
// same bits as N ranks in one. It is for CPU ranks, where the transport
// is not what limits speed; GPUs use NCCL.
//
// A rank's frame is: op (1 byte), dtype (1 byte), root (uint32), length
// (uint32), then its values as float32. The hub's answer is a status
// byte, then the result's float32 values (status 0) or why the collective
// failed (1). A rank that finds another's frame disagreeing with its own
// fails the collective.

// NewStarHub is rank 0's communicator: links[k-1] leads to rank k.
func NewStarHub(links []*Link) Communicator {
	return &starComm{rank: 0, size: len(links) + 1, links: links}
}

// NewStarRank is rank's communicator (rank >= 1), up leading to rank 0.
func NewStarRank(rank, size int, up *Link) Communicator {
	return &starComm{rank: rank, size: size, up: up}
}

type starComm struct {
	rank, size int
	links      []*Link // hub: ranks 1..size-1
	up         *Link   // other ranks: the hub
}

func (c *starComm) Rank() int { return c.rank }
func (c *starComm) Size() int { return c.size }

// Close ends the links: the other ranks' collectives fail.
func (c *starComm) Close() error {
	if c.up != nil {
		return c.up.Close()
	}
	for _, l := range c.links {
		l.Close()
	}
	return nil
}

type starHeader struct {
	op    localOp
	dtype tensor.DType
	root  int
	n     int
}

const starHeaderBytes = 10

func (h starHeader) append(b []byte) []byte {
	b = append(b, byte(h.op), byte(h.dtype))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.root))
	return binary.LittleEndian.AppendUint32(b, uint32(h.n))
}

func readStarHeader(b []byte) (starHeader, []byte, error) {
	if len(b) < starHeaderBytes {
		return starHeader{}, nil, errors.New("a collective frame too short for its header")
	}
	h := starHeader{op: localOp(b[0]), dtype: tensor.DType(b[1]),
		root: int(binary.LittleEndian.Uint32(b[2:])), n: int(binary.LittleEndian.Uint32(b[6:]))}
	return h, b[starHeaderBytes:], nil
}

// f32Bytes is buf's values as float32 (little-endian).
func f32Bytes(dst []byte, b Buffer) []byte {
	for i := range b.Len {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(b.at(i)))
	}
	return dst
}

func readF32(b []byte, n int) ([]float32, error) {
	if len(b) != 4*n {
		return nil, fmt.Errorf("a collective frame of %d bytes for %d float32 values", len(b), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// exchange is one collective: the hub gathers every rank's frame (in rank
// order, its own first) and answers each with reply(frames); another rank
// sends its frame and returns the hub's answer.
func (c *starComm) exchange(h starHeader, mine []byte, reply func(frames [][]byte) ([]byte, error)) ([]byte, error) {
	frame := h.append(nil)
	frame = append(frame, mine...)
	if c.up != nil {
		if err := c.up.Send(MsgColl, frame); err != nil {
			return nil, err
		}
		ans, err := c.up.Recv(MsgColl)
		if err != nil {
			return nil, err
		}
		if len(ans) == 0 || ans[0] != 0 {
			return nil, fmt.Errorf("rank 0: %s", ans[min(1, len(ans)):])
		}
		return ans[1:], nil
	}
	frames := [][]byte{mine}
	var bad error
	for _, l := range c.links {
		b, err := l.Recv(MsgColl)
		if err != nil { // the others still get an answer: the failure
			bad = cmp.Or(bad, err)
			frames = append(frames, nil)
			continue
		}
		theirs, body, err := readStarHeader(b)
		if err == nil && theirs != h {
			err = fmt.Errorf("collective mismatch: rank 0 called %v of %d %v (root %d), rank %d %v of %d %v (root %d)",
				h.op, h.n, h.dtype, h.root, l.Node, theirs.op, theirs.n, theirs.dtype, theirs.root)
		}
		if bad == nil {
			bad = err
		}
		frames = append(frames, body)
	}
	ans, err := []byte(nil), bad
	if err == nil {
		ans, err = reply(frames)
	}
	out := append([]byte{0}, ans...) // status 0: the answer follows
	if err != nil {
		out = append([]byte{1}, err.Error()...) // the other ranks fail with the reason
	}
	for _, l := range c.links {
		if serr := l.Send(MsgColl, out); serr != nil && err == nil {
			err = serr
		}
	}
	return ans, err
}

func (c *starComm) AllReduceSum(buf Buffer) error {
	if err := buf.check(); err != nil {
		return err
	}
	h := starHeader{op: opAllReduce, dtype: buf.DType, n: buf.Len}
	ans, err := c.exchange(h, f32Bytes(nil, buf), func(frames [][]byte) ([]byte, error) {
		var sum []float32
		for q, f := range frames {
			vals, err := readF32(f, buf.Len)
			if err != nil {
				return nil, err
			}
			if q == 0 {
				sum = vals
				continue
			}
			for i, v := range vals {
				sum[i] += v
			}
		}
		return f32Bytes(nil, HostF32(sum)), nil
	})
	if err != nil {
		return err
	}
	sum, err := readF32(ans, buf.Len)
	if err != nil {
		return err
	}
	buf.store(sum)
	return nil
}

func (c *starComm) AllGather(dst, src Buffer) error {
	if err := src.check(); err != nil {
		return err
	}
	if dst.Len != c.size*src.Len || dst.DType != src.DType {
		return fmt.Errorf("all-gather of %d %v into %d %v: the destination must hold %d ranks × %d", src.Len, src.DType, dst.Len, dst.DType, c.size, src.Len)
	}
	h := starHeader{op: opAllGather, dtype: src.DType, n: src.Len}
	ans, err := c.exchange(h, f32Bytes(nil, src), func(frames [][]byte) ([]byte, error) {
		var all []byte
		for _, f := range frames {
			if len(f) != 4*src.Len {
				return nil, fmt.Errorf("a collective frame of %d bytes for %d float32 values", len(f), src.Len)
			}
			all = append(all, f...)
		}
		return all, nil
	})
	if err != nil {
		return err
	}
	vals, err := readF32(ans, dst.Len)
	if err != nil {
		return err
	}
	dst.store(vals) // float32 carries bf16 values exactly
	return nil
}

func (c *starComm) Broadcast(buf Buffer, root int) error {
	if err := buf.check(); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("broadcast root %d outside the group's %d ranks", root, c.size)
	}
	h := starHeader{op: opBroadcast, dtype: buf.DType, root: root, n: buf.Len}
	ans, err := c.exchange(h, f32Bytes(nil, buf), func(frames [][]byte) ([]byte, error) {
		return frames[root], nil
	})
	if err != nil {
		return err
	}
	vals, err := readF32(ans, buf.Len)
	if err != nil {
		return err
	}
	buf.store(vals)
	return nil
}

// Abort fails the collectives of every rank: the hub closes its links. A
// rank other than the hub leaves its link open, so that its process can
// still report why it failed; its own collective has failed already.
func (c *starComm) Abort() error {
	if c.up == nil {
		return c.Close()
	}
	return nil
}
