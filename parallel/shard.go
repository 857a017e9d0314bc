package parallel

import (
	"fmt"
	"slices"

	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// Shard returns what rank holds of w under the plan. A contiguous shard
// (one range of the outermost cut dimension: q/k/v, gate/up, the
// vocabulary) is a view of w's bytes, so a memory-mapped checkpoint is
// read only where the rank's rows lie; other cuts copy the rank's bytes
// and nothing else. A synthetic (dummy) weight stays synthetic when its
// shard is contiguous (a device fills it), and otherwise has only its
// shard's values made.
func (p *Plan) Shard(w tensor.Weight, rank int) (tensor.Weight, error) {
	spec, err := p.Spec(w.Name, w.Shape, rank)
	if err != nil {
		return tensor.Weight{}, err
	}
	return p.apply(w, spec, rank)
}

func (p *Plan) apply(w tensor.Weight, spec Spec, rank int) (tensor.Weight, error) {
	if spec.Kind == Replicated {
		return w, nil
	}
	if w.Data == nil && w.Lazy != nil {
		// A weight dequantized on demand (an fp8 checkpoint's) is cut as
		// the bytes it stands for.
		var err error
		if w, err = w.Materialize(); err != nil {
			return tensor.Weight{}, err
		}
	}
	switch spec.Kind {
	case AddOnce:
		if rank == 0 {
			return w, nil
		}
		return zerosLike(w)
	case Vocab:
		start, rows := p.VocabShard(rank)
		have := min(rows, max(w.Shape[0]-start, 0))
		out, err := cut(w, 0, []Segment{{min(start, w.Shape[0]), have}})
		if err != nil || have == rows {
			return out, err
		}
		return padRows(out, rows)
	}
	return cut(w, spec.Dim, spec.Segments)
}

// cut keeps segs of dimension dim of w, concatenated in order.
func cut(w tensor.Weight, dim int, segs []Segment) (tensor.Weight, error) {
	if dim < 0 || dim >= len(w.Shape) {
		return tensor.Weight{}, fmt.Errorf("tensor %s %v has no dimension %d", w.Name, w.Shape, dim)
	}
	total := 0
	for _, s := range segs {
		if s.Start < 0 || s.Len < 0 || s.Start+s.Len > w.Shape[dim] {
			return tensor.Weight{}, fmt.Errorf("tensor %s: range [%d, %d) outside dimension %d of %v", w.Name, s.Start, s.Start+s.Len, dim, w.Shape)
		}
		total += s.Len
	}
	shape := slices.Clone(w.Shape)
	shape[dim] = total
	out := tensor.Weight{Name: w.Name, DType: w.DType, Shape: shape}
	last := len(w.Shape) - 1
	outer := 1
	for _, d := range w.Shape[:dim] {
		outer *= d
	}
	// inner is the elements of one index of dim.
	inner := 1
	for _, d := range w.Shape[dim+1:] {
		inner *= d
	}
	contiguous := outer == 1 && len(segs) == 1
	if w.Data == nil && w.Synthetic != nil {
		if contiguous {
			syn := w.Synthetic.Skip(segs[0].Start * inner)
			out.Synthetic = &syn
			return out, nil
		}
		// Make only the shard's values.
		size, _ := w.DType.RowBytes(1)
		out.Data = make([]byte, 0, out.NumElements()*size)
		for o := range outer {
			for _, s := range segs {
				first := (o*w.Shape[dim] + s.Start) * inner
				part := make([]byte, s.Len*inner*size)
				w.Synthetic.Fill(w.DType, first, part)
				out.Data = append(out.Data, part...)
			}
		}
		return out, nil
	}
	// byteRange is the bytes of indices [a, b) of dim within one outer block.
	var byteRange func(a, b int) (int, int, error)
	var blockBytes int
	if dim < last {
		rowBytes, err := w.DType.RowBytes(w.Shape[last])
		if err != nil {
			return tensor.Weight{}, fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		unit := inner / w.Shape[last] * rowBytes
		blockBytes = w.Shape[dim] * unit
		byteRange = func(a, b int) (int, int, error) { return a * unit, b * unit, nil }
	} else {
		var err error
		if blockBytes, err = w.DType.RowBytes(w.Shape[last]); err != nil {
			return tensor.Weight{}, fmt.Errorf("tensor %s: %w", w.Name, err)
		}
		byteRange = func(a, b int) (int, int, error) {
			lo, err1 := w.DType.RowBytes(a)
			hi, err2 := w.DType.RowBytes(b)
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("tensor %s: columns [%d, %d) of %v cut through a %v block; this many ranks cannot split it", w.Name, a, b, w.Shape, w.DType)
			}
			return lo, hi, nil
		}
	}
	if contiguous {
		lo, hi, err := byteRange(segs[0].Start, segs[0].Start+segs[0].Len)
		if err != nil {
			return tensor.Weight{}, err
		}
		out.Data = w.Data[lo:hi:hi]
		return out, nil
	}
	var data []byte
	for o := range outer {
		block := w.Data[o*blockBytes : (o+1)*blockBytes]
		for _, s := range segs {
			lo, hi, err := byteRange(s.Start, s.Start+s.Len)
			if err != nil {
				return tensor.Weight{}, err
			}
			data = append(data, block[lo:hi]...)
		}
	}
	out.Data = data
	return out, nil
}

// padRows extends w [rows, ...] with zero rows to n rows.
func padRows(w tensor.Weight, n int) (tensor.Weight, error) {
	w, err := w.Materialize()
	if err != nil {
		return tensor.Weight{}, err
	}
	rowBytes, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return tensor.Weight{}, err
	}
	perIndex := rowBytes // bytes of one index of dim 0
	for _, d := range w.Shape[1 : len(w.Shape)-1] {
		perIndex *= d
	}
	data := make([]byte, n*perIndex)
	copy(data, w.Data)
	shape := slices.Clone(w.Shape)
	shape[0] = n
	return tensor.Weight{Name: w.Name, DType: w.DType, Shape: shape, Data: data}, nil
}

// zerosLike is a weight of w's dtype and shape whose values are all zero
// (zero bytes are zero in every dtype gosling stores, blocks included).
func zerosLike(w tensor.Weight) (tensor.Weight, error) {
	rowBytes, err := w.DType.RowBytes(w.Cols())
	if err != nil {
		return tensor.Weight{}, fmt.Errorf("tensor %s: %w", w.Name, err)
	}
	return tensor.Weight{Name: w.Name, DType: w.DType, Shape: slices.Clone(w.Shape), Data: make([]byte, w.Rows()*rowBytes)}, nil
}

// Source is the weights one rank loads: the plan's shard of every tensor
// of WS, except the embedding and LM head, which it serves whole (a view,
// nothing read) because the model checks them against the whole
// vocabulary; Ops takes the rank's rows of those when it prepares them.
type Source struct {
	WS   model.WeightSource
	Plan *Plan
	Rank int
}

func (s *Source) Tensor(name string) (tensor.Weight, error) {
	w, err := s.WS.Tensor(name)
	if err != nil {
		return tensor.Weight{}, err
	}
	spec, err := s.Plan.Spec(name, w.Shape, s.Rank)
	if err != nil {
		return tensor.Weight{}, err
	}
	if spec.Kind == Vocab {
		return w, nil
	}
	return s.Plan.apply(w, spec, s.Rank)
}

func (s *Source) Has(name string) bool { return s.WS.Has(name) }
func (s *Source) Names() []string      { return s.WS.Names() }

// Close closes nothing: the underlying source belongs to the caller (the
// ranks of one process share one memory map).
func (s *Source) Close() error { return nil }
