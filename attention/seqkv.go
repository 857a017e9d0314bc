package attention

import (
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/kvcache"
	"github.com/gosling-ai/gosling/tensor"
)

// SeqKV reads the keys and values of one request's sequence, wherever they
// live: in the paged pool (by slot), or for an Encode batch in the
// forward's own k and v. Tokens of one page are contiguous in the pool, so
// a paged kernel asks for Run(j) tokens at a time; a token-indexed kernel
// asks for one.
type SeqKV struct {
	layer    *Layer
	pool     *kvcache.HostPool // nil in Encode mode
	slots    []int32
	pageSize int
	k, v     tensor.Host // Encode mode: the forward's inputs
	start    int         // Encode mode: the request's first row in k, v
	n        int         // sequence length
	kScratch []float32
	vScratch []float32
}

// Reset prepares reads for request r. Reuse one SeqKV per worker to
// keep its conversion scratch.
func (s *SeqKV) Reset(a *HostArgs, layer *Layer, b *forward.Batch, r int) {
	s.layer, s.n = layer, b.SeqLen(r)
	if b.Mode == forward.Encode {
		s.pool, s.k, s.v, s.start = nil, a.K, a.V, int(b.ExtendStarts[r])
		s.slots, s.pageSize = nil, 0
		return
	}
	s.pool, s.slots, s.pageSize = a.KV, b.SeqSlots(r), b.KV.PageSize()
}

// Len is the number of tokens in the sequence.
func (s *SeqKV) Len() int {
	return s.n
}

// Run is how many tokens from j (up to end) are contiguous in storage:
// the rest of j's page, or everything in Encode mode.
func (s *SeqKV) Run(j, end int) int {
	if s.pool == nil {
		return end - j
	}
	return min(end, (j/s.pageSize+1)*s.pageSize) - j
}

// Page is the pool page of token j (paged kernels index pages by it).
func (s *SeqKV) Page(j int) int32 { return s.slots[j] / int32(s.pageSize) }

// K returns the keys of tokens [j, j+n), which must be contiguous (n <=
// Run(j, ...)): [n, KStride()].
func (s *SeqKV) K(j, n int) []float32 {
	if s.pool == nil {
		w := s.k.Cols()
		return s.k.Data[(s.start+j)*w : (s.start+j+n)*w]
	}
	return s.pool.K(s.layer.Index, s.slots[j], n, &s.kScratch)
}

// KInto is K, decoding into dst (at least n·KStride() values) instead of
// the SeqKV's scratch when the pool does not store float32; views are
// returned as by K.
func (s *SeqKV) KInto(j, n int, dst []float32) []float32 {
	if s.pool == nil {
		return s.K(j, n)
	}
	return s.pool.KInto(s.layer.Index, s.slots[j], n, dst)
}

// KBF16 is the keys of tokens [j, j+n) (contiguous) as the pool's
// bfloat16 rows, in place: [n, KStride()] values of two bytes; nil unless
// the sequence is in a bfloat16 pool (kvcache.HostPool.KBF16).
func (s *SeqKV) KBF16(j, n int) []byte {
	if s.pool == nil {
		return nil
	}
	return s.pool.KBF16(s.layer.Index, s.slots[j], n)
}

// VBF16 is VInto's rows in place as KBF16: [n, VStride()] bfloat16
// values, or nil.
func (s *SeqKV) VBF16(j, n int) []byte {
	if s.pool == nil {
		return nil
	}
	return s.pool.VBF16(s.layer.Index, s.slots[j], n)
}

// VInto is V, decoding into dst (at least n·VStride() values) as KInto.
func (s *SeqKV) VInto(j, n int, dst []float32) []float32 {
	if s.pool == nil {
		return s.V(j, n)
	}
	return s.pool.VInto(s.layer.Index, s.slots[j], n, dst)
}

// V returns the values of tokens [j, j+n): [n, VStride()]; each row's
// first NumKVHeads*HeadDimV values are the value heads (for MLA the row is
// the latent vector, whose first HeadDimV values are the value).
func (s *SeqKV) V(j, n int) []float32 {
	if s.pool == nil {
		src := s.v
		if s.layer.MLA {
			src = s.k
		}
		w := src.Cols()
		return src.Data[(s.start+j)*w : (s.start+j+n)*w]
	}
	return s.pool.V(s.layer.Index, s.slots[j], n, &s.vScratch)
}

// KStride is the row width of K's result.
func (s *SeqKV) KStride() int { return s.layer.NumKVHeads * s.layer.HeadDim }

// VStride is the row width of V's result.
func (s *SeqKV) VStride() int {
	if s.layer.MLA {
		return s.layer.HeadDim
	}
	return s.layer.NumKVHeads * s.layer.HeadDimV
}
