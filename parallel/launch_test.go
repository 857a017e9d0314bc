package parallel_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gosling-ai/gosling/internal/testnet"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/parallel"
)

func TestLaunchValidate(t *testing.T) {
	// Llama-3.1-8B's counts: 32 heads, 8 KV heads.
	cfg := model.Config{Architecture: "LlamaForCausalLM", HiddenSize: 4096, NumHeads: 32, NumKVHeads: 8,
		HeadDim: 128, IntermediateSize: 14336, VocabSize: 128256, NumLayers: 32}
	dead := testnet.FreeAddr(t)
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() {
		for {
			c, err := live.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name string
		l    parallel.Launch
		want string // "" passes
	}{
		{"single", parallel.Launch{TPSize: 1, NNodes: 1}, ""},
		{"tp2", parallel.Launch{TPSize: 2, NNodes: 1}, ""},
		{"tp16 replicates KV", parallel.Launch{TPSize: 16, NNodes: 1}, ""},
		{"tp3", parallel.Launch{TPSize: 3, NNodes: 1}, "--tp-size 3: the model's 32 attention heads do not divide evenly among 3 ranks"},
		{"tp0", parallel.Launch{TPSize: 0, NNodes: 1}, "--tp-size must be at least 1"},
		{"node rank past nnodes", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 2, DistInitAddr: live.Addr().String()}, "--node-rank 2 must lie in [0, --nnodes 2)"},
		{"negative node rank", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: -1, DistInitAddr: live.Addr().String()}, "--node-rank -1 must lie in [0, --nnodes 2)"},
		{"uneven hosts", parallel.Launch{TPSize: 3, NNodes: 2, DistInitAddr: live.Addr().String()}, "--tp-size 3 does not divide evenly over --nnodes 2"},
		{"no address", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 1}, "--nnodes 2 needs --dist-init-addr"},
		{"address without hosts", parallel.Launch{TPSize: 2, NNodes: 1, DistInitAddr: live.Addr().String()}, "--dist-init-addr is for ranks on several hosts"},
		{"bad address", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 1, DistInitAddr: "localhost"}, `--dist-init-addr "localhost": want HOST:PORT`},
		{"unreachable", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 1, DistInitAddr: dead}, "--dist-init-addr " + dead + ": node 0 is unreachable from node 1"},
		{"reachable", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 1, DistInitAddr: live.Addr().String()}, ""},
		{"node 0 cannot listen", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 0, DistInitAddr: live.Addr().String()}, "node 0 cannot listen there"},
		{"node 0 listens", parallel.Launch{TPSize: 2, NNodes: 2, NodeRank: 0, DistInitAddr: dead}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate(&cfg, 2*time.Second)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
