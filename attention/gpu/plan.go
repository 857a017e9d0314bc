package gpu

import (
	"fmt"
	"unsafe"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cuda"
	"github.com/gosling-ai/gosling/forward"
)

// Layout is the host image of a plan: int32 words, then the custom-mask
// bytes, uploaded as one copy. Offsets are in words.
//
//	req:      [NumReqs, reqFields]   prefix, extend len, extend start, seq len, page offset
//	tokReq:   [NumTokens]            request of each new token
//	tokHi:    [NumTokens]            Visible(...).Hi, independent of the layer
//	tokMask:  [NumTokens]            offset of the token's mask row in mask, or -1
//	outSlots: [NumTokens]            KV slot of each new token (-1 in Encode mode)
//	pages:    per request ceil(SeqLen/PageSize) page ids: the ReqToToken row
//	          divided by the page size; in Encode mode (no cache) the page
//	          size is 1 and the "pages" are the rows of the forward's k and v
//	mask:     the batch's CustomMask as bytes (0/1)
type Layout struct {
	Words                                                    []int32
	Mask                                                     []byte
	ReqAt, TokReqAt, TokHiAt, TokMaskAt, OutSlotsAt, PagesAt int // word offsets
	PageSize                                                 int
	MaxExtend, MaxSeq                                        int
}

// BuildLayout lays out the plan of b. It is pure (no device), so the
// visibility and page arrays are tested on any machine.
func BuildLayout(b *forward.Batch, words []int32) (*Layout, error) {
	nr, nt := b.NumReqs(), b.NumTokens()
	encode := b.Mode == forward.Encode
	lay := &Layout{PageSize: 1}
	if !encode {
		if b.KV == nil {
			return nil, fmt.Errorf("gpu attention plan: a %v batch needs a KV cache", b.Mode)
		}
		lay.PageSize = b.KV.PageSize()
	}
	ps := lay.PageSize
	numPages := 0
	for r := range nr {
		numPages += (b.SeqLen(r) + ps - 1) / ps
	}
	lay.ReqAt = 0
	lay.TokReqAt = nr * reqFields
	lay.TokHiAt = lay.TokReqAt + nt
	lay.TokMaskAt = lay.TokHiAt + nt
	lay.OutSlotsAt = lay.TokMaskAt + nt
	lay.PagesAt = lay.OutSlotsAt + nt
	total := lay.PagesAt + numPages
	if cap(words) < total {
		words = make([]int32, total)
	}
	words = words[:total]
	var noLayer attention.Layer // Hi does not depend on the layer; windows are applied in the kernels
	pageAt := lay.PagesAt
	for r := range nr {
		seq := b.SeqLen(r)
		req := words[r*reqFields : (r+1)*reqFields]
		clear(req)
		req[reqPrefix], req[reqExtLen], req[reqExtStart] = b.PrefixLens[r], b.ExtendLens[r], b.ExtendStarts[r]
		req[reqSeqLen], req[reqPageOff] = int32(seq), int32(pageAt-lay.PagesAt)
		lay.MaxExtend = max(lay.MaxExtend, int(b.ExtendLens[r]))
		lay.MaxSeq = max(lay.MaxSeq, seq)
		for t := range int(b.ExtendLens[r]) {
			tok := int(b.ExtendStarts[r]) + t
			words[lay.TokReqAt+tok] = int32(r)
			words[lay.TokHiAt+tok] = int32(attention.Visible(b, &noLayer, r, t).Hi)
			words[lay.TokMaskAt+tok] = -1
			if b.CustomMask != nil && b.MaskStarts[r] >= 0 {
				words[lay.TokMaskAt+tok] = b.MaskStarts[r] + int32(t*seq)
			}
			words[lay.OutSlotsAt+tok] = -1
			if !encode {
				words[lay.OutSlotsAt+tok] = b.OutSlots[tok]
			}
		}
		if encode {
			for j := range seq {
				words[pageAt+j] = b.ExtendStarts[r] + int32(j)
			}
			pageAt += seq
			continue
		}
		slots := b.SeqSlots(r)
		for p := 0; p*ps < seq; p++ {
			words[pageAt] = slots[p*ps] / int32(ps)
			pageAt++
		}
	}
	lay.Words = words
	lay.Mask = lay.Mask[:0]
	for _, m := range b.CustomMask {
		var v byte
		if m {
			v = 1
		}
		lay.Mask = append(lay.Mask, v)
	}
	return lay, nil
}

// Plan is the device copy of a Layout for one forward; every layer reads it.
type Plan struct {
	Layout
	Batch     *forward.Batch
	NumReqs   int
	NumTokens int
	Encode    bool
	// Device addresses of the arrays (see Layout); Mask is 0 without a mask.
	Req, TokReq, TokHi, TokMask, OutSlots, Pages, Mask cuda.DevicePtr
	// Extra is the address of the words Planner.Extra appended (0: none).
	Extra cuda.DevicePtr
}

// Planner uploads plans into one persistent device buffer through a pinned
// staging buffer: no device allocation per forward once the sizes settle,
// and the copy is asynchronous on the runtime's stream.
type Planner struct {
	rt       *Runtime
	words    []int32
	staging  []byte // pinned
	buf      cuda.Buffer
	bufCap   int
	uploaded cuda.Event // the last upload's copy has been read from staging
	pending  bool
	plan     Plan
	// maskAt is the byte offset of the mask in buf: past the words, and
	// only ever raised, so that the mask's address stays the same while
	// the page arrays before it grow (a captured verify step's kernels
	// take it as an argument).
	maskAt int
	// Extra, when set, appends a backend's own int32 arrays to the plan's
	// words, so they travel in the same upload (Plan.Extra points at them).
	Extra func(b *forward.Batch, lay *Layout, words []int32) ([]int32, error)
}

// NewPlanner makes a planner on rt.
func NewPlanner(rt *Runtime) *Planner { return &Planner{rt: rt} }

// For returns the plan of b, planning it if b is not the batch planned last
// (a backend used without Plan, as the conformance harness of the CPU may).
func (p *Planner) For(b *forward.Batch) (*Plan, error) {
	if p.plan.Batch == b && b != nil {
		return &p.plan, nil
	}
	return p.Plan(b)
}

// Plan lays out b and enqueues its upload.
func (p *Planner) Plan(b *forward.Batch) (*Plan, error) {
	lay, err := BuildLayout(b, p.words)
	if err != nil {
		return nil, err
	}
	extraAt := len(lay.Words)
	if p.Extra != nil {
		// The extra words start 16-byte aligned (cuDNN tensors declare it).
		for len(lay.Words)%4 != 0 {
			lay.Words = append(lay.Words, 0)
		}
		extraAt = len(lay.Words)
		if lay.Words, err = p.Extra(b, lay, lay.Words); err != nil {
			return nil, err
		}
	}
	p.words = lay.Words
	if 4*len(lay.Words) > p.maskAt {
		p.maskAt = (4*len(lay.Words)*3/2 + 255) &^ 255
	}
	maskAt := p.maskAt
	total := maskAt + len(lay.Mask)
	rt := p.rt
	if p.pending { // the staging buffer is still being read by the last copy
		if err := rt.Dev.EventSync(p.uploaded); err != nil {
			return nil, err
		}
		p.pending = false
	}
	if len(p.staging) < total {
		if p.staging != nil {
			rt.Dev.HostFree(p.staging)
			p.staging = nil
		}
		if p.staging, err = rt.Dev.HostAlloc(max(total*3/2, 4096)); err != nil {
			return nil, fmt.Errorf("gpu attention plan: pinned staging: %w", err)
		}
	}
	if p.bufCap < total {
		rt.Free(p.buf) // stream-ordered: earlier kernels reading it were enqueued first
		p.bufCap = max(total*3/2, 4096)
		if p.buf, err = rt.Alloc(p.bufCap); err != nil {
			p.bufCap = 0
			return nil, fmt.Errorf("gpu attention plan: %w", err)
		}
	}
	if len(lay.Words) > 0 {
		copy(p.staging, unsafe.Slice((*byte)(unsafe.Pointer(&lay.Words[0])), 4*len(lay.Words)))
	}
	copy(p.staging[maskAt:], lay.Mask)
	if total > 0 {
		if err := cuda.CopyHtoDAsync(rt.Dev, p.buf.Ptr, p.staging[:total], rt.Stream); err != nil {
			return nil, err
		}
		if p.uploaded == 0 {
			if p.uploaded, err = rt.Dev.NewEvent(false); err != nil {
				return nil, err
			}
		}
		if err := rt.Dev.Record(p.uploaded, rt.Stream); err != nil {
			return nil, err
		}
		p.pending = true
	}
	base := p.buf.Ptr
	at := func(word int) cuda.DevicePtr { return base.Add(4 * word) }
	p.plan = Plan{Layout: *lay, Batch: b, NumReqs: b.NumReqs(), NumTokens: b.NumTokens(), Encode: b.Mode == forward.Encode,
		Req: at(lay.ReqAt), TokReq: at(lay.TokReqAt), TokHi: at(lay.TokHiAt), TokMask: at(lay.TokMaskAt),
		OutSlots: at(lay.OutSlotsAt), Pages: at(lay.PagesAt)}
	if len(lay.Mask) > 0 {
		p.plan.Mask = base.Add(maskAt)
	}
	if len(lay.Words) > extraAt {
		p.plan.Extra = at(extraAt)
	}
	return &p.plan, nil
}

// Close frees the planner's buffers.
func (p *Planner) Close() error {
	rt := p.rt
	if p.pending {
		rt.Dev.EventSync(p.uploaded)
	}
	if p.uploaded != 0 {
		rt.Dev.DestroyEvent(p.uploaded)
	}
	rt.Free(p.buf)
	p.buf, p.bufCap = cuda.Buffer{}, 0
	if p.staging != nil {
		rt.Dev.HostFree(p.staging)
		p.staging = nil
	}
	return nil
}
