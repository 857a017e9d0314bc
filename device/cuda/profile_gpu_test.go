package cuda

import (
	"strings"
	"testing"
	"time"
)

// TestGPUKernelProfile times a forward of one memset and one GEMM: each
// is one operation with a positive time, and the forward's span holds
// them both.
func TestGPUKernelProfile(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	o := NewModelOps(dev, k, lt, dev.Stream, ModelOpsOptions{WeightDType: BF16})
	defer o.Close()
	g := Gemm{M: 256, N: 512, K: 1024, TransB: true, DType: BF16, OutDType: BF16}
	bufs := make([]Buffer, 3)
	for i, n := range []int{g.M * g.K * 2, g.N * g.K * 2, g.M * g.N * 2} {
		b, err := dev.Mem.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Mem.Free(b)
		bufs[i] = b
	}
	// Plan (and tune) the GEMM first: tuning synchronises.
	if err := lt.Matmul(dev.Stream, g, bufs[0].Ptr, bufs[1].Ptr, bufs[2].Ptr, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.StartProfile(); err != nil {
		t.Fatal(err)
	}
	if !o.Profiling() {
		t.Fatal("Profiling() is false after StartProfile")
	}
	for range 3 {
		err := o.ProfileForward("decode", func() error {
			if err := dev.MemsetAsync(bufs[0].Ptr, 0, g.M*g.K*2, dev.Stream); err != nil {
				return err
			}
			if err := dev.MemsetAsync(bufs[1].Ptr, 0, g.N*g.K*2, dev.Stream); err != nil {
				return err
			}
			return lt.Matmul(dev.Stream, g, bufs[0].Ptr, bufs[1].Ptr, bufs[2].Ptr, 1, 0)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := o.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	if o.Profiling() {
		t.Error("Profiling() is true after StopProfile")
	}
	if len(p.Forwards) != 1 || p.Forwards[0].Count != 3 || p.Forwards[0].Starved != 0 {
		t.Fatalf("forwards %+v, want one label with 3 forwards, none starved", p.Forwards)
	}
	f := p.Forwards[0]
	calls := map[string]int{}
	for _, op := range p.Ops {
		if op.Time <= 0 {
			t.Errorf("%s: time %v", op.Name, op.Time)
		}
		name := op.Name
		if strings.HasPrefix(name, "cublasLt ") {
			name = "cublasLt"
		}
		calls[name] += op.Calls
	}
	if calls["memset"] != 6 || calls["cublasLt"] != 3 || len(calls) != 2 {
		t.Errorf("operations %v, want 6 memsets and 3 cublasLt", calls)
	}
	// Each operation's time and the span are differences of event stamps
	// (resolution about half a microsecond), rounded on their own, so the
	// sum may pass the span by a rounding step per operation.
	slack := time.Duration(calls["memset"]+calls["cublasLt"]) * time.Microsecond
	if f.Ops <= 0 || f.Ops > f.GPU+slack {
		t.Errorf("operations %v outside the forwards' span %v (+%v of rounding)", f.Ops, f.GPU, slack)
	}
	t.Logf("%+v", p)
}
