package parallel_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/testnet"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/parallel"
)

// TestRendezvous: node 0 hands the id to every other node, whichever
// starts first; a node of another deployment or a duplicate node rank is
// refused by name, and missing nodes time out naming them.
func TestRendezvous(t *testing.T) {
	id := bytes.Repeat([]byte{0xab, 0x01}, 64) // an NCCL id's 128 bytes
	t.Run("three nodes, joiners first", func(t *testing.T) {
		addr := testnet.FreeAddr(t)
		got := make([][]byte, 3)
		served := make(chan error, 1)
		err := parallel.Each(3, func(k int) error {
			if k == 0 {
				time.Sleep(300 * time.Millisecond) // the others dial before node 0 listens
				served <- parallel.ServeRendezvous(addr, 3, id, 10*time.Second)
				return nil
			}
			var err error
			got[k], err = parallel.JoinRendezvous(addr, k, 3, 10*time.Second)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-served; err != nil {
			t.Fatal(err)
		}
		for k := 1; k < 3; k++ {
			if !bytes.Equal(got[k], id) {
				t.Errorf("node %d got %x", k, got[k])
			}
		}
	})
	for _, tc := range []struct {
		name       string
		node, seen int // the joiner's --node-rank and --nnodes
		want       string
	}{
		{"other nnodes", 1, 4, "was started with --nnodes 4, node 0 with 2"},
		{"rank zero", 0, 2, "claims --node-rank 0, outside [1, 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := testnet.FreeAddr(t)
			served := make(chan error, 1)
			go func() { served <- parallel.ServeRendezvous(addr, 2, id, 10*time.Second) }()
			_, jerr := parallel.JoinRendezvous(addr, tc.node, tc.seen, 10*time.Second)
			if jerr == nil || !strings.Contains(jerr.Error(), "node 0 refused") {
				t.Errorf("joiner: %v", jerr)
			}
			if err := <-served; err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("node 0: %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("a probe first", func(t *testing.T) {
		// A node checking that node 0 listens (Launch.Validate) connects
		// and closes; node 0 keeps waiting for the real node.
		addr := testnet.FreeAddr(t)
		served := make(chan error, 1)
		go func() { served <- parallel.ServeRendezvous(addr, 2, id, 10*time.Second) }()
		l := parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 1, DistInitAddr: addr}
		if err := l.Validate(&model.Config{NumHeads: 2, NumKVHeads: 2, HeadDim: 2, IntermediateSize: 2, VocabSize: 2}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		got, err := parallel.JoinRendezvous(addr, 1, 2, 10*time.Second)
		if err != nil || !bytes.Equal(got, id) {
			t.Fatalf("after a probe: %x, %v", got, err)
		}
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing node", func(t *testing.T) {
		err := parallel.ServeRendezvous(testnet.FreeAddr(t), 3, id, 300*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "nodes [1 2] did not join within 300ms") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no node 0", func(t *testing.T) {
		addr := testnet.FreeAddr(t)
		_, err := parallel.JoinRendezvous(addr, 1, 2, 500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "--dist-init-addr "+addr+": node 0 did not answer node 1 within 500ms") {
			t.Fatalf("err = %v", err)
		}
	})
}
