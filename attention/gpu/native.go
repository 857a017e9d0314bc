package gpu

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
)

// NativeEntry registers the GPU reference: per request, cuBLAS batched GEMMs
// for the scores and for probabilities·values, with a float32 masked
// softmax kernel between them that applies attention.Visible exactly.
var NativeEntry = attention.Entry{
	Name:        "native",
	Description: "GPU reference: cuBLAS batched GEMMs for q·kᵀ and p·v, float32 masked softmax kernel",
	Caps:        EagerCaps,
	New:         newNative,
}

// nativeBackend materialises the scores of one request (one chunk of its
// queries) at a time in float32, after gathering its keys and values from
// the pages into dense buffers; it is meant to be obviously right.
type nativeBackend struct {
	rt      *Runtime
	blas    *cuda.Blas
	planner *Planner
}

func newNative(opts attention.Options) (attention.Backend, error) {
	rt, err := FromOptions(opts)
	if err != nil {
		return nil, err
	}
	blas, err := rt.Blas()
	if err != nil {
		return nil, fmt.Errorf("native attention on %s: %w", opts.Device, err)
	}
	return &nativeBackend{rt: rt, blas: blas, planner: NewPlanner(rt)}, nil
}

func (*nativeBackend) Name() string { return "native" }

func (be *nativeBackend) Plan(b *forward.Batch) error {
	_, err := be.planner.Plan(b)
	return err
}

func (be *nativeBackend) Extend(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

func (be *nativeBackend) Decode(q, k, v tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	return be.attend(q, k, v, layer, b)
}

// scoreBudget bounds the float32 score matrix of one GEMM (bytes); longer
// requests are done a chunk of queries at a time.
const scoreBudget = 256 << 20

func (be *nativeBackend) attend(qt, kt, vt tensor.T, layer *attention.Layer, b *forward.Batch) (tensor.T, error) {
	q, k, v, err := CheckDevice(qt, kt, vt, layer, b)
	if err != nil {
		return tensor.T{}, err
	}
	p, err := be.planner.For(b)
	if err != nil {
		return tensor.T{}, err
	}
	rt := be.rt
	if b.Mode != forward.Encode {
		if err := rt.StoreKV(p, k, v, layer, b.KV.Pool); err != nil {
			return tensor.T{}, err
		}
	}
	out, err := rt.NewOutput(p, layer, q.DType)
	if err != nil {
		return tensor.T{}, err
	}
	err = rt.Dev.Do(func() error {
		for r := range p.NumReqs {
			if err := be.request(p, r, q, k, v, layer, b, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		rt.FreeOutput(out)
		return tensor.T{}, err
	}
	return out.T(), nil
}

// request attends the new tokens of request r:
//
//	K, V:  [NumKVHeads, seq, HeadDim|HeadDimV]  gathered, dequantised
//	Q:     [NumHeads, n, HeadDim]               heads of KV head g = rows g·group·n …
//	S = P: [NumHeads, n, seq]                   GEMM per KV head: Q_g · K_gᵀ, then softmax
//	O:     [NumHeads, n, HeadDimV]              GEMM per KV head: P_g · V_g
func (be *nativeBackend) request(p *Plan, r int, q, k, v tensor.Device, layer *attention.Layer, b *forward.Batch, out tensor.Device) error {
	rt := be.rt
	src := SourceOf(p, k, v, layer, b)
	if _, err := KernelSuffix(src.DType); err != nil {
		return err
	}
	if _, err := KernelSuffix(q.DType); err != nil {
		return err
	}
	sinks, err := rt.SinksPtr(layer)
	if err != nil {
		return err
	}
	seq, ext := b.SeqLen(r), int(b.ExtendLens[r])
	start, prefix := int(b.ExtendStarts[r]), int(b.PrefixLens[r])
	H, KVH, dk, dv := layer.NumHeads, layer.NumKVHeads, layer.HeadDim, layer.HeadDimV
	group := H / KVH
	chunk := max(1, min(ext, scoreBudget/(4*H*seq)))

	var bufs []cuda.Buffer
	defer func() {
		for _, buf := range bufs {
			rt.release(buf)
		}
	}()
	alloc := func(floats int) (cuda.DevicePtr, error) {
		buf, err := rt.scratch(4 * floats)
		bufs = append(bufs, buf)
		return buf.Ptr, err
	}
	kBuf, err := alloc(KVH * seq * dk)
	if err != nil {
		return err
	}
	vBuf, err := alloc(KVH * seq * dv)
	if err != nil {
		return err
	}
	qBuf, err := alloc(H * chunk * dk)
	if err != nil {
		return err
	}
	sBuf, err := alloc(H * chunk * seq)
	if err != nil {
		return err
	}
	oBuf, err := alloc(H * chunk * dv)
	if err != nil {
		return err
	}
	gather := func(dst, from cuda.DevicePtr, stride int, scale float32, width int) error {
		return rt.launchAttnGather(cuda.LaunchConfig{Grid: cuda.Dim3{X: seq, Y: KVH, Z: 1}, Block: cuda.D1(128)}, src.DType,
			attnGatherArgs{Dst: dst, Src: from, Stride: stride, Scale: scale, Req: p.Req, Pages: p.Pages,
				PageSize: p.PageSize, R: r, Width: width})
	}
	if err := gather(kBuf, src.K, src.KStride, src.KScale, dk); err != nil {
		return err
	}
	if err := gather(vBuf, src.V, src.VStride, src.VScale, dv); err != nil {
		return err
	}
	for c0 := 0; c0 < ext; c0 += chunk {
		n := min(chunk, ext-c0)
		row0 := start + c0
		perHead := cuda.LaunchConfig{Grid: cuda.Dim3{X: n, Y: H, Z: 1}, Block: cuda.D1(128)}
		gq := attnGatherQArgs{Dst: qBuf, Q: cuda.DevicePtr(q.Ptr), QStride: q.Cols(), Row0: row0, Dk: dk}
		if err := rt.launchAttnGatherQ(perHead, q.DType, gq); err != nil {
			return err
		}
		scores := cuda.BatchedGemm{
			Gemm:  cuda.Gemm{M: group * n, N: seq, K: dk, TransB: true, DType: tensor.F32, OutDType: tensor.F32},
			Batch: KVH, StrideA: int64(group * n * dk), StrideB: int64(seq * dk), StrideD: int64(group * n * seq),
		}
		if err := be.blas.GemmStridedBatched(rt.Stream, scores, qBuf, kBuf, sBuf, 1, 0); err != nil {
			return err
		}
		sm := attnSoftmaxArgs{S: sBuf, Seq: seq, Row0: row0, QSeq0: prefix + c0, TokHi: p.TokHi, TokMask: p.TokMask, Mask: p.Mask,
			SmScale: layer.Scale, Softcap: layer.LogitSoftcap, Window: layer.SlidingWindow, Sinks: sinks}
		if err := rt.launchAttnSoftmax(cuda.LaunchConfig{Grid: cuda.Dim3{X: n, Y: H, Z: 1}, Block: cuda.D1(256)}, sm); err != nil {
			return err
		}
		values := cuda.BatchedGemm{
			Gemm:  cuda.Gemm{M: group * n, N: dv, K: seq, DType: tensor.F32, OutDType: tensor.F32},
			Batch: KVH, StrideA: int64(group * n * seq), StrideB: int64(seq * dv), StrideD: int64(group * n * dv),
		}
		if err := be.blas.GemmStridedBatched(rt.Stream, values, sBuf, vBuf, oBuf, 1, 0); err != nil {
			return err
		}
		sc := attnScatterArgs{Out: cuda.DevicePtr(out.Ptr), OutStride: out.Cols(), Src: oBuf, Row0: row0, Dv: dv}
		if err := rt.launchAttnScatter(perHead, q.DType, sc); err != nil {
			return err
		}
	}
	return nil
}
