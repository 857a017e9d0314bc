package flash

import "github.com/gosling-ai/gosling/attention"

// worker is one goroutine's scratch, grown on demand and reused across
// items and calls so that no tile allocates. Never shared.
type worker struct {
	kv   attention.SeqKV
	q    []float32 // [rows, dk] the item's queries, times Scale
	m, l []float32 // [rows] running max and sum of exp(score - m)
	acc  []float32 // [rows, dv] running Σ exp(score - m)·v
	s    []float32 // [tileKeys] one row of scores, then probabilities
	span [][2]int  // per query of the item: its visible keys in the tile
	// The current tile: kRows[x] is the whole K row (all KV heads) of the
	// tile's key x, in place in the pool or in kTile; likewise V.
	kRows, vRows [tileKeys][]float32
	kTile, vTile []float32 // [tileKeys, KStride|VStride] decoded rows of a tile that spans pages
}

// run computes one item. Rows are ordered (KV head, query, query head
// within the group), so the rows that share a K/V tile are adjacent.
func (w *worker) run(j *job, it *item) {
	r, t0 := int(it.req), int(it.t0)
	nq, nh := int(it.t1-it.t0), int(it.h1-it.h0)
	group, dk, dv := j.group, j.dk, j.dv
	perHead := nq * group
	rows := nh * perHead
	w.q, w.m, w.l, w.acc = grow(w.q, rows*dk), grow(w.m, rows), grow(w.l, rows), grow(w.acc, rows*dv)
	w.s = grow(w.s, tileKeys)
	if cap(w.span) < nq {
		w.span = make([][2]int, nq)
	}
	w.span = w.span[:nq]
	for i := range w.m {
		w.m[i] = negInf
	}
	clear(w.l)
	clear(w.acc)

	first := int(j.b.ExtendStarts[r]) + t0 // the item's first token row
	for hi := range nh {
		for qi := range nq {
			h := (int(it.h0) + hi) * group
			src := j.q.Row(first + qi)[h*dk : (h+group)*dk]
			dst := w.q[(hi*perHead+qi*group)*dk:][:group*dk]
			for x, val := range src {
				dst[x] = val * j.layer.Scale
			}
		}
	}

	w.kv.Reset(j.k, j.v, j.layer, j.b, r)
	vis := j.vis[first : first+nq]
	for lo := int(it.klo); lo < int(it.khi); {
		hi := min(int(it.khi), (lo/tileKeys+1)*tileKeys)
		// Each query's visible keys within [lo, hi), trimmed to its first
		// and last visible key; the tile is read only over their union and
		// not at all when no query sees into it (windows, masks).
		ta, tb := hi, lo
		for qi, v := range vis {
			a, b := max(v.Lo, lo), min(v.Hi, hi)
			if v.Mask != nil {
				for a < b && !v.Mask[a] {
					a++
				}
				for b > a && !v.Mask[b-1] {
					b--
				}
			}
			w.span[qi] = [2]int{a, b}
			if a < b {
				ta, tb = min(ta, a), max(tb, b)
			}
		}
		if ta < tb {
			w.load(j, ta, tb)
			w.tile(j, it, ta)
		}
		lo = hi
	}

	if it.part >= 0 { // one split of the keys: the merge normalises
		p, at := j.part, int(it.part)
		copy(p.m[at:at+rows], w.m)
		copy(p.l[at:at+rows], w.l)
		copy(p.acc[at*dv:(at+rows)*dv], w.acc)
		return
	}
	for row := range rows {
		if w.l[row] == 0 {
			continue // no key visible: zero, as the reference gives
		}
		out := j.outRow(r, t0, nq, int(it.h0), row)
		inv := j.layer.Normalizer(j.rowHead(nq, int(it.h0), row), w.m[row], w.l[row])
		for d, a := range w.acc[row*dv : (row+1)*dv] {
			out[d] = a * inv
		}
	}
}

// load points kRows and vRows at the keys [ta, tb) of the tile, reading
// the pool one page at a time (one K and one V call per page). Float32
// pools and Encode inputs are read in place; other dtypes are decoded into
// SeqKV's scratch, which the next call reuses, so a tile that spans pages
// keeps a copy of each page's rows.
func (w *worker) load(j *job, ta, tb int) {
	inPlace := j.views || w.kv.Run(ta, tb) == tb-ta
	if !inPlace {
		w.kTile = grow(w.kTile, tileKeys*j.kStride)
		if !j.layer.MLA {
			w.vTile = grow(w.vTile, tileKeys*j.vStride)
		}
	}
	for x := ta; x < tb; {
		run := w.kv.Run(x, tb)
		k := w.kv.K(x, run)
		if !inPlace {
			k = w.kTile[(x-ta)*j.kStride:][:copy(w.kTile[(x-ta)*j.kStride:], k)]
		}
		rowsOf(w.kRows[x-ta:], k, j.kStride)
		if !j.layer.MLA { // MLA's value is the head of the latent K row
			v := w.kv.V(x, run)
			if !inPlace {
				v = w.vTile[(x-ta)*j.vStride:][:copy(w.vTile[(x-ta)*j.vStride:], v)]
			}
			rowsOf(w.vRows[x-ta:], v, j.vStride)
		}
		x += run
	}
}

// rowsOf points dst[x] at row x of src: [n, stride].
func rowsOf(dst [][]float32, src []float32, stride int) {
	for x := range len(src) / stride {
		dst[x] = src[x*stride : (x+1)*stride]
	}
}

// tile folds one tile (its first key ta) into every row of the item that
// sees into it: scores for the row's visible keys, softcap and mask, the
// online-softmax update, then the probabilities times the values.
func (w *worker) tile(j *job, it *item, ta int) {
	nq, nh := int(it.t1-it.t0), int(it.h1-it.h0)
	group, dk, dv := j.group, j.dk, j.dv
	perHead := nq * group
	vis := j.vis[int(j.b.ExtendStarts[it.req])+int(it.t0):]
	softcapping := j.layer.LogitSoftcap
	vRows := &w.vRows
	if j.layer.MLA {
		vRows = &w.kRows
	}
	for hi := range nh {
		kOff, vOff := (int(it.h0)+hi)*dk, (int(it.h0)+hi)*dv
		if j.layer.MLA {
			vOff = 0
		}
		for qi := range nq {
			a, b := w.span[qi][0], w.span[qi][1]
			if a >= b {
				continue
			}
			mask := vis[qi].Mask
			keys, vals := w.kRows[a-ta:b-ta], vRows[a-ta:b-ta]
			for g := range group {
				row := hi*perHead + qi*group + g
				s := w.s[:b-a]
				dotRows(s, w.q[row*dk:(row+1)*dk], keys, kOff)
				if softcapping > 0 {
					softcap(s, softcapping)
				}
				if mask != nil {
					for x := range s {
						if !mask[a+x] {
							s[x] = negInf
						}
					}
				}
				// The span is trimmed to visible ends, so mt is finite.
				mt, m := maxOf(s), w.m[row]
				acc := w.acc[row*dv : (row+1)*dv]
				if mt > m {
					if m != negInf {
						alpha := exp(m - mt)
						w.l[row] *= alpha
						scale(acc, alpha)
					}
					m = mt
					w.m[row] = m
				}
				w.l[row] += expSub(s, m)
				accumulateRows(acc, s, vals, vOff)
			}
		}
	}
}
