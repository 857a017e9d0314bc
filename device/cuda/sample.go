package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// SampleRow asks for one token drawn from one row of a logits tensor on the
// device (kernels/sample.cu).
//
// The filters are the host sampler's (package sample), applied in its
// order: temperature, top-k (exactly k, ties at the k-th place to the lower
// id), top-p on the top-k renormalised distribution, min-p. Greedy rows
// (Temperature 0, or TopK 1) pick exactly what the host picks: the argmax,
// the lowest id on ties, NaN skipped.
//
// A row with a token mask (SampleRow.Mask, structured output) draws only
// allowed tokens: the kernels read every other logit as -Inf, before any
// filter, as the host's constrained sampler does.
//
// Random rows draw with a counter-based generator (Philox4x32-10 keyed by
// Seed, counter (token id, Step)), so the same Seed and Step give the same
// token on every call, in any batch and at any row. This is the host
// sampler's distribution but not its random stream: a seeded request is
// reproducible on the GPU and on the CPU, not across the two.
type SampleRow = device.SampleRow

// packSampleRows checks rows against a logits tensor of nRows rows of vocab
// logits and packs them for the kernel, in one block for one upload: the
// parameters, [len(rows), sampleWords], then the token masks of the rows
// that have one, [masks, maskWords] uint32 words (bit id&31 of word id>>5
// set: allowed; past a row's Mask, forbidden), in row order; a row's word
// 9 is its mask's index, -1 without. maskWords is 0 when no row has one.
// Out-of-range values are normalised the way sample.NewSampler does: a NaN
// or infinite temperature samples at 1, a negative one is greedy; top-p
// outside (0, 1) is off; min-p <= 0 (or NaN) is off and above 1 is 1;
// top-k < 0 is off.
func packSampleRows(rows []SampleRow, nRows, vocab int) (block []int32, maskWords int, err error) {
	masks := 0
	for _, r := range rows {
		if r.Mask != nil {
			masks++
		}
	}
	if masks > 0 {
		maskWords = (vocab + 31) / 32
	}
	out := make([]int32, 0, sampleWords*len(rows)+masks*maskWords)
	mask := -1
	for i, r := range rows {
		if r.Row < 0 || r.Row >= nRows {
			return nil, 0, fmt.Errorf("sample row %d reads logits row %d, outside [0, %d)", i, r.Row, nRows)
		}
		t := r.Temperature
		switch {
		case math.IsNaN(float64(t)) || math.IsInf(float64(t), 0):
			t = 1
		case t < 0:
			t = 0
		}
		topK := r.TopK
		if topK < 0 {
			topK = 0
		}
		topK = min(topK, math.MaxInt32)
		topP := r.TopP
		if !(topP > 0 && topP < 1) {
			topP = 1
		}
		minP := r.MinP
		if !(minP > 0) {
			minP = 0
		}
		minP = min(minP, 1)
		index := int32(-1)
		if r.Mask != nil {
			mask++
			index = int32(mask)
		}
		out = append(out,
			int32(r.Row),
			int32(math.Float32bits(t)),
			int32(topK),
			int32(math.Float32bits(topP)),
			int32(math.Float32bits(minP)),
			int32(uint32(r.Seed)), int32(uint32(r.Seed>>32)),
			int32(uint32(r.Step)), int32(uint32(r.Step>>32)),
			index)
	}
	for _, r := range rows {
		if r.Mask == nil {
			continue
		}
		for w := range maskWords {
			word := uint32(0)
			if w/2 < len(r.Mask) {
				word = uint32(r.Mask[w/2] >> (32 * (w % 2)))
			}
			out = append(out, int32(word))
		}
	}
	return out, maskWords, nil
}

// Sample launches the sampling kernel: one token for each row of params
// (packSampleRows's block, already on the device), written to out.
//
//	logits: rows of stride elements (0: vocab), dt   params: [n, sampleWords] int32   out: [n] int32
//	masks: [*, maskWords] uint32, the token masks params rows name (0 and 0: none)
func (k *Kernels) Sample(s Stream, out, logits, params, masks DevicePtr, maskWords, n, vocab, stride int, dt DType) error {
	if n == 0 {
		return nil
	}
	if stride == 0 {
		stride = vocab
	}
	return k.launchSample(s, LaunchConfig{Grid: D1(n), Block: D1(1024)}, dt,
		sampleArgs{Out: out, Logits: logits, Params: params, Masks: masks, MaskWords: maskWords, Vocab: vocab, Stride: stride})
}

// Sample draws one token for each of rows from logits, a device tensor
// [rows, vocab] of this forward (valid until the next BeginForward), and
// returns the ids in the order of rows. It is one kernel launch (two for a
// long greedy batch), one upload (the parameters and the rows' token
// masks) and one small copy back, which waits for the stream. It may run
// after EndForward; its buffers live in the forward's arena.
func (o *ModelOps) Sample(logits tensor.T, rows []SampleRow) ([]int32, error) {
	if !logits.OnDevice() {
		return nil, errors.New("cuda Sample: the logits are not a device tensor")
	}
	if len(logits.Shape) != 2 || logits.Shape[1] <= 0 {
		return nil, fmt.Errorf("cuda Sample: logits of shape %v, want [rows, vocab]", logits.Shape)
	}
	switch logits.DType {
	case F32, BF16, F16:
	default:
		return nil, fmt.Errorf("cuda Sample: %v logits", logits.DType)
	}
	vocab := logits.Shape[1]
	block, maskWords, err := packSampleRows(rows, logits.Shape[0], vocab)
	if err != nil {
		return nil, fmt.Errorf("cuda Sample: %w", err)
	}
	ids := make([]int32, len(rows))
	if len(rows) == 0 {
		return ids, nil
	}
	err = o.dev.Do(func() error {
		buf, err := o.arena.alloc(4 * (len(block) + len(ids)))
		if err != nil {
			return err
		}
		dParams, dOut := buf.Ptr, buf.Ptr.Add(4*len(block))
		dMasks := DevicePtr(0)
		if maskWords > 0 {
			dMasks = dParams.Add(4 * sampleWords * len(rows))
		}
		// A pageable copy, staged by the driver before the call returns:
		// not the forward's pinned staging, which only BeginForward
		// recycles (and a CUDA graph step swaps for its own).
		if err := CopyHtoDAsync(o.dev, dParams, block, o.stream); err != nil {
			return err
		}
		if allGreedy(rows) && vocab > argmaxSplitMin {
			if err := o.greedy(dOut, logits, dParams, dMasks, maskWords, len(rows)); err != nil {
				return err
			}
		} else if err := o.k.Sample(o.stream, dOut, DevicePtr(logits.DevPtr()), dParams, dMasks, maskWords, len(rows), vocab, vocab, logits.DType); err != nil {
			return err
		}
		if err := CopyDtoHAsync(o.dev, ids, dOut, o.stream); err != nil {
			return err
		}
		err = o.dev.StreamSync(o.stream)
		runtime.KeepAlive(block)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda Sample: %w", err)
	}
	return ids, nil
}

// argmaxSplitMin is the vocabulary past which greedy rows take the split
// argmax (argmax_part and argmax_final) rather than one block per row;
// argmaxChunk is the logits each argmax_part block reduces.
const (
	argmaxSplitMin = 4096
	argmaxChunk    = 4096
)

// allGreedy reports rows that all take the argmax by temperature.
func allGreedy(rows []SampleRow) bool {
	for _, r := range rows {
		if r.Temperature > 0 {
			return false
		}
	}
	return true
}

// greedy enqueues the split argmax of n rows of logits (rows and token
// masks named by the packed parameter block dParams) into out.
func (o *ModelOps) greedy(out DevicePtr, logits tensor.T, dParams, dMasks DevicePtr, maskWords, n int) error {
	vocab := logits.Shape[1]
	parts := (vocab + argmaxChunk - 1) / argmaxChunk
	buf, err := o.arena.alloc(8 * n * parts)
	if err != nil {
		return err
	}
	partV, partI := buf.Ptr, buf.Ptr.Add(4*n*parts)
	part := argmaxPartArgs{PartV: partV, PartI: partI, Logits: DevicePtr(logits.DevPtr()), Params: dParams, Masks: dMasks, MaskWords: maskWords,
		Vocab: vocab, Stride: vocab, Chunk: argmaxChunk}
	if err := o.k.launchArgmaxPart(o.stream, LaunchConfig{Grid: Dim3{n, parts, 1}, Block: D1(256)}, logits.DType, part); err != nil {
		return err
	}
	return o.k.launchArgmaxFinal(o.stream, LaunchConfig{Grid: D1(n), Block: D1(32)}, argmaxFinalArgs{Out: out, PartV: partV, PartI: partI, NParts: parts})
}

// VerifyRow is one draft-tree node to decide on the device (SpecVerify).
type VerifyRow = device.VerifyRow

// The kernels' VERIFY_DRAFTS is device.MaxVerifyDrafts: the index is out
// of range, a compile error, unless the two are equal.
var _ = [1]struct{}{}[verifyDrafts-device.MaxVerifyDrafts]

// NodeVerdict is SpecVerify's decision at one node.
type NodeVerdict = device.NodeVerdict

// packVerifyRows checks rows against a logits tensor of nRows rows of
// vocab logits and packs them for spec_verify_*, in one block: the
// parameters as packSampleRows packs them, [len(rows), sampleWords], then
// the drafts, [len(rows), verifyDrafts] int32, each row's in order and
// padded with -1. A row may not have a token mask, more than verifyDrafts
// drafts, or a draft outside [0, vocab).
func packVerifyRows(rows []VerifyRow, nRows, vocab int) ([]int32, error) {
	plain := make([]SampleRow, len(rows))
	for i, r := range rows {
		if r.Mask != nil {
			return nil, fmt.Errorf("verify row %d has a token mask", i)
		}
		if len(r.Drafts) > verifyDrafts {
			return nil, fmt.Errorf("verify row %d has %d drafts, more than %d", i, len(r.Drafts), verifyDrafts)
		}
		for _, d := range r.Drafts {
			if d < 0 || int(d) >= vocab {
				return nil, fmt.Errorf("verify row %d drafts token %d, outside [0, %d)", i, d, vocab)
			}
		}
		plain[i] = r.SampleRow
	}
	block, _, err := packSampleRows(plain, nRows, vocab)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		for j := range verifyDrafts {
			d := int32(-1)
			if j < len(r.Drafts) {
				d = r.Drafts[j]
			}
			block = append(block, d)
		}
	}
	return block, nil
}

// SpecVerify launches spec_verify_*: a (child, token) pair for each row
// of params into out.
//
//	logits: rows of stride elements (0: vocab), dt   params: [n, sampleWords] int32
//	drafts: [n, verifyDrafts] int32   out: [n, 2] int32
func (k *Kernels) SpecVerify(s Stream, out, logits, params, drafts DevicePtr, n, vocab, stride int, dt DType) error {
	if n == 0 {
		return nil
	}
	if stride == 0 {
		stride = vocab
	}
	return k.launchSpecVerify(s, LaunchConfig{Grid: D1(n), Block: D1(1024)}, dt,
		specVerifyArgs{Out: out, Logits: logits, Params: params, Drafts: drafts, Vocab: vocab, Stride: stride})
}

// SpecVerify decides the draft-tree nodes rows from logits, a device
// tensor [rows, vocab] of this forward, each node on its own
// (device.SpecVerifier): one kernel launch, one upload (parameters and
// drafts) and one copy back of two int32 a row, which waits for the
// stream. The filters and the random numbers are Sample's (a node with no
// drafts draws Sample's token for its seed and step); kernels/sample.cu
// spec_verify_* states the rule.
func (o *ModelOps) SpecVerify(logits tensor.T, rows []VerifyRow) ([]NodeVerdict, error) {
	if !logits.OnDevice() {
		return nil, errors.New("cuda SpecVerify: the logits are not a device tensor")
	}
	if len(logits.Shape) != 2 || logits.Shape[1] <= 0 {
		return nil, fmt.Errorf("cuda SpecVerify: logits of shape %v, want [rows, vocab]", logits.Shape)
	}
	switch logits.DType {
	case F32, BF16, F16:
	default:
		return nil, fmt.Errorf("cuda SpecVerify: %v logits", logits.DType)
	}
	vocab := logits.Shape[1]
	block, err := packVerifyRows(rows, logits.Shape[0], vocab)
	if err != nil {
		return nil, fmt.Errorf("cuda SpecVerify: %w", err)
	}
	if len(rows) == 0 {
		return []NodeVerdict{}, nil
	}
	res := make([]int32, 2*len(rows))
	err = o.dev.Do(func() error {
		buf, err := o.arena.alloc(4 * (len(block) + len(res)))
		if err != nil {
			return err
		}
		dParams, dOut := buf.Ptr, buf.Ptr.Add(4*len(block))
		dDrafts := dParams.Add(4 * sampleWords * len(rows))
		// Pageable, as Sample's: not the forward's pinned staging.
		if err := CopyHtoDAsync(o.dev, dParams, block, o.stream); err != nil {
			return err
		}
		if err := o.k.SpecVerify(o.stream, dOut, DevicePtr(logits.DevPtr()), dParams, dDrafts, len(rows), vocab, vocab, logits.DType); err != nil {
			return err
		}
		if err := CopyDtoHAsync(o.dev, res, dOut, o.stream); err != nil {
			return err
		}
		err = o.dev.StreamSync(o.stream)
		runtime.KeepAlive(block)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda SpecVerify: %w", err)
	}
	out := make([]NodeVerdict, len(rows))
	for i := range out {
		out[i] = NodeVerdict{Child: res[2*i], Token: res[2*i+1]}
	}
	return out, nil
}
