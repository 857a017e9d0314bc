package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/tensor"
)

// The device.Ops methods that multi-head latent attention and mixtures of
// experts (DeepSeek) add: ConcatHeads, LinearPerHead, Route and
// ScatterAddRows. Misuse (mismatched shapes) panics with the shapes, as a
// slice bound would, but says what was wrong.

// ConcatHeads joins a [T, heads*da] and b [T, heads*db] head by head.
func (o *Ops) ConcatHeads(a, b tensor.T, heads int) tensor.T {
	rows := a.Rows()
	if heads <= 0 || b.Rows() != rows || a.Cols()%heads != 0 || b.Cols()%heads != 0 {
		panic(fmt.Sprintf("cpu.ConcatHeads: %v and %v do not split into %d heads of the same rows", a.Shape, b.Shape, heads))
	}
	da, db := a.Cols()/heads, b.Cols()/heads
	out := tensor.New(rows, heads*(da+db))
	for t := range rows {
		src0, src1, dst := a.Row(t), b.Row(t), out.Row(t)
		for h := range heads {
			d := dst[h*(da+db):]
			copy(d[:da], src0[h*da:(h+1)*da])
			copy(d[da:da+db], src1[h*db:(h+1)*db])
		}
	}
	return out
}

// LinearPerHead is y_h = x_h·W_hᵀ per head, float32 dot products over the
// weight's values (an F32 weight is read in place; other dtypes are
// decoded once per call). Heads run in parallel.
func (o *Ops) LinearPerHead(x tensor.T, m device.Matrix, heads int) tensor.T {
	w := m.(*matrix).w
	in, outAll := w.Cols(), w.Rows()
	if heads <= 0 || outAll%heads != 0 || x.Cols() != heads*in {
		panic(fmt.Sprintf("cpu.LinearPerHead: x %v does not fit %d heads of a [%d, %d] matrix", x.Shape, heads, outAll, in))
	}
	vals := w.Float32()
	outH, rows := outAll/heads, x.Rows()
	y := tensor.New(rows, outAll)
	o.Workers.For(heads, 1, func(lo, hi int) {
		for h := lo; h < hi; h++ {
			wh := vals[h*outH*in : (h+1)*outH*in] // [outH, in]
			for t := range rows {
				src := x.Row(t)[h*in : (h+1)*in]
				dst := y.Row(t)[h*outH : (h+1)*outH]
				for d := range dst {
					dst[d] = Dot(wh[d*in:(d+1)*in], src)
				}
			}
		}
	})
	return y
}

// ScatterAddRows sets dst[rows[i]] += scales[i]·src[i].
func (o *Ops) ScatterAddRows(dst, src tensor.T, rows []int32, scales []float32) {
	if src.Rows() != len(rows) || len(scales) != len(rows) || (len(rows) > 0 && src.Cols() != dst.Cols()) {
		panic(fmt.Sprintf("cpu.ScatterAddRows: src %v, %d rows, %d scales, dst %v", src.Shape, len(rows), len(scales), dst.Shape))
	}
	for i, r := range rows {
		Axpy(dst.Row(int(r)), scales[i], src.Row(i))
	}
}

// Route chooses each token's experts by r's rule (see device.Router).
// Scores are computed in float64 and rounded once.
func (o *Ops) Route(logits tensor.T, r *device.Router) (experts []int32, weights []float32) {
	nExp := logits.Cols()
	if err := r.Check(nExp); err != nil {
		panic("cpu.Route: " + err.Error())
	}
	var bias vector
	if r.Bias != nil {
		bias = r.Bias.(vector)
	}
	return route(logits, r, bias)
}

func route(logits tensor.T, r *device.Router, bias []float32) (experts []int32, weights []float32) {
	nExp, nTok, k := logits.Cols(), logits.Rows(), r.TopK
	experts = make([]int32, 0, nTok*k)
	weights = make([]float32, 0, nTok*k)
	scores := make([]float32, nExp)
	choice := make([]float32, nExp)
	eligible := make([]bool, nExp)
	order := make([]int, nExp)
	groups := max(r.Groups, 1)
	perGroup := nExp / groups
	groupScore := make([]float32, groups)
	groupOrder := make([]int, groups)

	for t := range nTok {
		row := logits.Row(t)
		if r.Softmax {
			softmax(scores, row)
		} else {
			for e, l := range row {
				scores[e] = Sigmoid(l)
			}
		}
		copy(choice, scores)
		for e, b := range bias {
			choice[e] += b
		}

		for e := range eligible {
			eligible[e] = !r.Grouped()
		}
		if r.Grouped() {
			for g := range groups {
				if r.GroupByMaxScore {
					groupScore[g] = slices.Max(scores[g*perGroup : (g+1)*perGroup])
				} else {
					groupScore[g] = sumTop2(choice[g*perGroup : (g+1)*perGroup])
				}
			}
			topIndices(groupOrder, groupScore)
			for _, g := range groupOrder[:r.TopKGroups] {
				for e := g * perGroup; e < (g+1)*perGroup; e++ {
					eligible[e] = true
				}
			}
		}

		n := 0
		for e := range nExp {
			if eligible[e] {
				order[n] = e
				n++
			}
		}
		chosen := order[:n]
		slices.SortStableFunc(chosen, func(a, b int) int { return cmpDesc(choice[a], choice[b]) })
		chosen = chosen[:k]

		first := len(weights)
		var sum float32
		for _, e := range chosen {
			experts = append(experts, int32(e))
			weights = append(weights, scores[e])
			sum += scores[e]
		}
		for i := first; i < len(weights); i++ {
			if r.NormTopK {
				weights[i] /= sum + 1e-20
			}
			weights[i] *= r.Scale
		}
	}
	return experts, weights
}

// sumTop2 is the sum of the two largest values (the one value of a
// single-expert group).
func sumTop2(x []float32) float32 {
	best, second := float32(math.Inf(-1)), float32(math.Inf(-1))
	for _, v := range x {
		switch {
		case v > best:
			best, second = v, best
		case v > second:
			second = v
		}
	}
	if len(x) < 2 {
		return best
	}
	return best + second
}

// topIndices writes into order the indices of x sorted by descending value
// (ties: lower index first).
func topIndices(order []int, x []float32) {
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpDesc(x[a], x[b]) })
}

func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// softmax writes the softmax of x into dst, with float64 accumulation.
func softmax(dst, x []float32) {
	m := slices.Max(x)
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		dst[i] = float32(e)
		sum += e
	}
	for i := range dst {
		dst[i] = float32(float64(dst[i]) / sum)
	}
}
