package cpuattn

import (
	"math"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device/cpu"
)

// workerScratch is one worker's private state; rows are the item's query
// rows, (token, head) with the head fastest.
type workerScratch struct {
	kv      attention.SeqKV // holds the pool's dtype-conversion scratch
	kvNext  attention.SeqKV // the next item's sequence, to warm its first keys
	q       []float32       // [rows, Dk]: the item's query rows times Scale
	scores  []float32       // [rows, keyTile]: scores, then probabilities
	acc     []float32       // [rows, Dv]: unnormalised output
	rowMax  []float32       // [rows]: running max of the scores
	rowSum  []float32       // [rows]: running Σ exp(score − rowMax)
	visLo   []int           // [query tokens]: first key the token sees in the chunk
	visHi   []int           // [query tokens]: one past its last
	masks   [][]bool        // [query tokens]: its custom-mask row, or nil
	seenKey []bool          // [keyTile]: some row sees the key (else V is not read)
	pFirst  []int           // [rows]: the tile's first column with a nonzero probability
	pEnd    []int           // [rows]: one past its last
	span    [][2]int        // [query tokens]: the token's visible columns [a, b) of the tile
	kRows   [][]float32     // [keyTile]: the tile's K rows (pool views, or kTile)
	kNext   [][]float32     // [keyTile]: the next tile's K rows, to warm (views)
	kTile   []float32       // [keyTile, KStride]: decoded K rows when the pool's are not views
	vRows   [][]float32     // [keyTile]: the tile's V rows (pool views, vTile, or zeroRow)
	vTile   []float32       // [keyTile, VStride]: decoded V rows when the pool's are not views
	zeroRow []float32       // [VStride]: stands in for keys no row sees
	// A one-token item over a bfloat16 pool (item.bf16) reads the pool's
	// rows in place instead of kRows, vRows and zeroRow.
	kRowsBF   [][]byte // [keyTile]: the tile's K rows
	vRowsBF   [][]byte // [keyTile]: the tile's V rows (or zeroRowBF)
	zeroRowBF []byte   // [2·VStride]: zeros, for keys no row sees
}

func (ws *workerScratch) size(rows, tokens, keyTile, dimK, kStride, dimV, vStride int) {
	ws.q = grow(ws.q, rows*dimK)
	ws.span = grow(ws.span, tokens)
	ws.kRows = grow(ws.kRows, keyTile)
	ws.kNext = grow(ws.kNext, keyTile)[:0]
	ws.kTile = grow(ws.kTile, keyTile*kStride)
	ws.pFirst = grow(ws.pFirst, rows)
	ws.pEnd = grow(ws.pEnd, rows)
	ws.vRows = grow(ws.vRows, keyTile)
	ws.vTile = grow(ws.vTile, keyTile*vStride)
	ws.zeroRow = grow(ws.zeroRow, vStride) // never written: stays zero
	ws.kRowsBF = grow(ws.kRowsBF, keyTile)
	ws.vRowsBF = grow(ws.vRowsBF, keyTile)
	ws.zeroRowBF = grow(ws.zeroRowBF, 2*vStride) // never written: stays zero
	ws.scores = grow(ws.scores, rows*keyTile)
	ws.acc = grow(ws.acc, rows*dimV)
	ws.rowMax = grow(ws.rowMax, rows)
	ws.rowSum = grow(ws.rowSum, rows)
	ws.visLo = grow(ws.visLo, tokens)
	ws.visHi = grow(ws.visHi, tokens)
	ws.masks = grow(ws.masks, tokens)
	ws.seenKey = grow(ws.seenKey, keyTile)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// item is one work item's geometry, derived from its task.
type item struct {
	req, chunk  int
	rp          *reqPlan
	t0, tokens  int // query tokens [t0, t0+tokens) of the request
	kvLo        int // first KV head
	h0          int // first query head
	headsPerRow int // query heads per token: rows = tokens·headsPerRow
	rows        int
	// bf16: one token over a bfloat16 pool (lr.bf16Rows). The item is
	// bound by reading its K and V rows, so it reads them in place
	// (kRowsBF, vRowsBF), widening in registers, rather than decoding
	// them into float32 tiles first: the decode pass wrote and reread
	// twice the bytes the kernels read. The sums are bit for bit the
	// same. It does not warm each pass's successor as float32 views do
	// (warmsRows): on stories110M at 512 and 2048 tokens warming measured
	// no faster (2048: 164-213 against 179-226 decode tok/s without).
	bf16 bool
}

// attendChunk runs work item i: task i/kvGroups over the KV heads
// [kvLo, kvLo+headsPerItem). It attends the task's query tokens, for every
// query head of those KV heads, over the keys of its chunk that each token
// sees, with an online softmax over tiles of keyTile keys, and writes each
// row's normalised partial output and log-sum-exp.
//
//	rows:   (t − t0)·headsPerRow + (h − h0), h the query head
//	q row:  q[start+t, h·Dk : (h+1)·Dk]      K row of key j: K(j)[kvh·Dk : (kvh+1)·Dk]
//	out:    out[start+t, h·Dv : (h+1)·Dv]    V row of key j: V(j)[kvh·Dv : (kvh+1)·Dv]
//
// For MLA the one latent row is both: kvh is 0 and V(j)[:Dv] is the value.
func (be *Backend) attendChunk(ws *workerScratch, lr *layerRun, i int) {
	tk := be.plan.tasks[i/lr.kvGroups]
	it := item{req: int(tk.req), chunk: int(tk.chunk), rp: &be.plan.reqs[tk.req], t0: int(tk.t0), tokens: int(tk.t1 - tk.t0)}
	it.kvLo = (i % lr.kvGroups) * lr.headsPerItem
	it.h0 = it.kvLo * lr.group
	it.headsPerRow = lr.headsPerItem * lr.group
	it.rows = it.tokens * it.headsPerRow
	it.bf16 = lr.bf16Rows && it.tokens == 1
	dv := lr.layer.HeadDimV

	// Clip each token's visibility to the chunk; [first, last) is their union.
	chunkLo, chunkHi := it.rp.chunkKeys(it.chunk)
	first, last := chunkHi, chunkLo
	for ti := range it.tokens {
		vis := attention.Visible(lr.b, lr.layer, it.req, it.t0+ti)
		lo, hi := max(chunkLo, vis.Lo), min(chunkHi, vis.Hi)
		ws.visLo[ti], ws.visHi[ti], ws.masks[ti] = lo, hi, vis.Mask
		if lo < hi {
			first, last = min(first, lo), max(last, hi)
		}
	}

	for x := range ws.rowMax[:it.rows] {
		ws.rowMax[x] = negInf
	}
	clear(ws.rowSum[:it.rows])
	clear(ws.acc[:it.rows*dv])
	if first < last {
		ws.loadQueries(lr, &it)
		ws.kv.Reset(&lr.in, lr.layer, lr.b, it.req)
		tile := be.tune.keyTile
		for j0 := first; j0 < last; j0 += tile {
			n := min(tile, last-j0)
			ws.scoreTile(lr, &it, j0, n, tile)
			ws.softmaxTile(&it, n, tile, dv)
			if it.bf16 {
				ws.valueTileBF16(lr, &it, n, tile)
				continue
			}
			var warm [][]float32
			switch {
			case !lr.warmsRows:
			case j0+n < last:
				warm = ws.viewK(&ws.kv, j0+n, min(last, j0+n+tile))
			default:
				warm = be.nextItemKeys(ws, lr, i)
			}
			ws.valueTile(lr, &it, j0, n, tile, warm)
		}
	}
	be.finish(ws, lr, &it)
}

// loadQueries copies the item's query rows, times Scale, into ws.q.
func (ws *workerScratch) loadQueries(lr *layerRun, it *item) {
	dk := lr.layer.HeadDim
	qWidth := lr.layer.NumHeads * dk
	width := it.headsPerRow * dk
	for ti := range it.tokens {
		qAt := (it.rp.start+it.t0+ti)*qWidth + it.h0*dk
		src, dst := lr.in.Q.Data[qAt:qAt+width], ws.q[ti*width:(ti+1)*width]
		for x, v := range src {
			dst[x] = v * lr.layer.Scale
		}
	}
}

// scoreTile writes the scaled (and soft-capped) scores of keys [j0, j0+n)
// into ws.scores[row, 0:n], −Inf where the row's token does not see the
// key. The K rows of the keys some token sees are gathered once (views of
// the pool, or decoded copies); each query row is then scored against
// them in one vectorised pass (DotRows), so a K row loaded into cache
// serves every query head of its KV group and every token of the item.
//
// With views (warmsRows) the tile's V rows are gathered too, and the
// first token's pass warms them into L2 as it reads the K rows, so that
// memory keeps streaming through the softmax and valueTile starts from
// cache; valueTile warms the next tile's K rows in turn. A decode step's
// attention reads its KV rows once, from memory, so without the warming
// every pass would restart the stream from a cold cache.
func (ws *workerScratch) scoreTile(lr *layerRun, it *item, j0, n, tile int) {
	layer := lr.layer
	dk, group := layer.HeadDim, lr.group
	// Each token's visible columns [a, b), trimmed to its first and last
	// unmasked key; [ua, ub) is their union.
	ua, ub := n, 0
	for ti := range it.tokens {
		a, b := max(ws.visLo[ti], j0)-j0, min(ws.visHi[ti], j0+n)-j0
		if mask := ws.masks[ti]; mask != nil {
			for a < b && !mask[j0+a] {
				a++
			}
			for b > a && !mask[j0+b-1] {
				b--
			}
		}
		if a >= b {
			a, b = 0, 0
		} else {
			ua, ub = min(ua, a), max(ub, b)
		}
		ws.span[ti] = [2]int{a, b}
	}
	clear(ws.seenKey[:n])
	var warm [][]float32
	switch {
	case ua >= ub:
	case it.bf16:
		ws.viewBF16(&ws.kv, j0+ua, j0+ub, ws.kRowsBF[ua:ub], false)
		ws.viewBF16(&ws.kv, j0+ua, j0+ub, ws.vRowsBF[ua:ub], true)
	default:
		ws.loadK(lr, j0+ua, j0+ub, ua)
		if lr.warmsRows {
			ws.viewV(j0+ua, j0+ub, ua)
			warm = ws.vRows[ua:ub]
		}
	}
	width := it.headsPerRow * dk
	for ti := range it.tokens {
		a, b := ws.span[ti][0], ws.span[ti][1]
		mask := ws.masks[ti]
		base := ti * it.headsPerRow * tile
		if a < b && it.bf16 {
			cpu.DotRowsHeadsBF16(ws.scores[base+a:], tile, ws.q[ti*width:][:width], it.headsPerRow, group, ws.kRowsBF[a:b], it.kvLo*dk)
		} else if a < b {
			// Every head of the token in one pass over the K rows.
			dotRowsHeads(ws.scores[base+a:], tile, ws.q[ti*width:][:width], it.headsPerRow, group, ws.kRows[a:b], it.kvLo*dk, warm, it.tokens > 1)
			warm = nil
		}
		for hr := range it.headsPerRow {
			sc := ws.scores[base+hr*tile:][:n]
			if a >= b {
				fillNegInf(sc)
				continue
			}
			fillNegInf(sc[:a])
			fillNegInf(sc[b:])
			s := sc[a:b]
			if cp := layer.LogitSoftcap; cp > 0 {
				for x, v := range s {
					s[x] = cp * float32(math.Tanh(float64(v/cp)))
				}
			}
			if mask != nil {
				for x := range s {
					if !mask[j0+a+x] {
						s[x] = negInf
					}
				}
			}
		}
		for col := a; col < b; col++ {
			if mask == nil || mask[j0+col] {
				ws.seenKey[col] = true
			}
		}
	}
}

// loadK points kRows[col0:] at the K rows of keys [lo, hi), one SeqKV
// call per contiguous run: views of the pool, or rows of converted dtypes
// decoded straight into kTile.
func (ws *workerScratch) loadK(lr *layerRun, lo, hi, col0 int) {
	kStride := ws.kv.KStride()
	for j := lo; j < hi; {
		run := ws.kv.Run(j, hi)
		col := col0 + j - lo
		k := ws.kv.KInto(j, run, ws.kTile[col*kStride:(col+run)*kStride])
		for x := range run {
			ws.kRows[col+x] = k[x*kStride : (x+1)*kStride]
		}
		j += run
	}
}

// viewV points vRows[col0:] at the V rows of keys [lo, hi), which are
// views (warmsRows).
func (ws *workerScratch) viewV(lo, hi, col0 int) {
	vStride := ws.kv.VStride()
	for j := lo; j < hi; {
		run := ws.kv.Run(j, hi)
		v := ws.kv.V(j, run)
		for x := range run {
			ws.vRows[col0+j-lo+x] = v[x*vStride : (x+1)*vStride]
		}
		j += run
	}
}

// viewBF16 points dst at the bfloat16 K (or, with v, V) rows of keys
// [lo, hi) of kv in the pool (dst has hi − lo rows).
func (ws *workerScratch) viewBF16(kv *attention.SeqKV, lo, hi int, dst [][]byte, v bool) {
	stride := 2 * kv.KStride()
	if v {
		stride = 2 * kv.VStride()
	}
	for j := lo; j < hi; {
		run := kv.Run(j, hi)
		var rows []byte
		if v {
			rows = kv.VBF16(j, run)
		} else {
			rows = kv.KBF16(j, run)
		}
		for x := range run {
			dst[j-lo+x] = rows[x*stride : (x+1)*stride]
		}
		j += run
	}
}

// viewK points kNext at the K rows of keys [lo, hi) of kv, which are
// views (warmsRows).
func (ws *workerScratch) viewK(kv *attention.SeqKV, lo, hi int) [][]float32 {
	kStride := kv.KStride()
	ws.kNext = ws.kNext[:0]
	for j := lo; j < hi; {
		run := kv.Run(j, hi)
		k := kv.K(j, run)
		for x := range run {
			ws.kNext = append(ws.kNext, k[x*kStride:(x+1)*kStride])
		}
		j += run
	}
	return ws.kNext
}

// nextItemKeys is the K rows of the first tile that the next item in the
// queue reads, which this worker most likely takes after item i, when
// that item reads the same KV heads (nil otherwise): most decode items
// are one or two tiles, so without it most K passes would start cold.
func (be *Backend) nextItemKeys(ws *workerScratch, lr *layerRun, i int) [][]float32 {
	next := int(be.next.Load())
	if next >= len(be.plan.tasks)*lr.kvGroups || next%lr.kvGroups != i%lr.kvGroups {
		return nil
	}
	tk := be.plan.tasks[next/lr.kvGroups]
	lo, hi := be.plan.reqs[tk.req].chunkKeys(int(tk.chunk))
	vis := attention.Visible(lr.b, lr.layer, int(tk.req), int(tk.t0))
	lo, hi = max(lo, vis.Lo), min(hi, vis.Hi)
	if lo >= hi {
		return nil
	}
	ws.kvNext.Reset(&lr.in, lr.layer, lr.b, int(tk.req))
	return ws.viewK(&ws.kvNext, lo, min(hi, lo+be.tune.keyTile))
}

func fillNegInf(x []float32) {
	for i := range x {
		x[i] = negInf
	}
}

// softmaxTile is the online-softmax step: each row's running max, sum and
// output are rescaled to the tile's max when it is larger, and the tile's
// scores become probabilities under the running max.
func (ws *workerScratch) softmaxTile(it *item, n, tile, dv int) {
	for row := range it.rows {
		sc := ws.scores[row*tile : row*tile+n]
		tileMax := maxOf(sc)
		if tileMax == negInf { // nothing visible: weight 0 for every key
			ws.pFirst[row], ws.pEnd[row] = 0, 0
			clear(sc) // valueTile may sweep the row along with its token's others
			continue
		}
		if old := ws.rowMax[row]; tileMax > old {
			if ws.rowSum[row] > 0 {
				alpha := float32(math.Exp(float64(old - tileMax)))
				ws.rowSum[row] *= alpha
				scaleInPlace(ws.acc[row*dv:(row+1)*dv], alpha)
			}
			ws.rowMax[row] = tileMax
		}
		ws.rowSum[row] += expSub(sc, ws.rowMax[row])
		ws.pFirst[row], ws.pEnd[row] = nonzeroSpan(sc)
	}
}

// valueTile adds Σ_j p[row, j]·V_j to each row's output. Each key's V row
// is read (and decoded) once for all rows; a row then sums the tile in
// registers (pvTile). With views, scoreTile gathered the V rows, and the
// first pass warms warm's rows: the K rows of the next tile the worker
// scores.
func (ws *workerScratch) valueTile(lr *layerRun, it *item, j0, n, tile int, warm [][]float32) {
	dv := lr.layer.HeadDimV
	vStride := ws.kv.VStride()
	for col := range n {
		switch {
		case !ws.seenKey[col]:
			ws.vRows[col] = ws.zeroRow
		case lr.warmsRows: // gathered by scoreTile
		default: // a view, or decoded into vTile
			ws.vRows[col] = ws.kv.VInto(j0+col, 1, ws.vTile[col*vStride:(col+1)*vStride])
		}
	}
	// A token's heads together, over the union of their nonzero spans
	// (probabilities outside a row's own span are 0), in one pass over the
	// V rows.
	hpr := it.headsPerRow
	for ti := range it.tokens {
		r0 := ti * hpr
		lo, hi := n, 0
		for row := r0; row < r0+hpr; row++ {
			if pLo, pHi := ws.pFirst[row], ws.pEnd[row]; pLo < pHi {
				lo, hi = min(lo, pLo), max(hi, pHi)
			}
		}
		if lo >= hi {
			continue
		}
		pvTileHeads(ws.acc[r0*dv:(r0+hpr)*dv], dv, ws.scores[r0*tile+lo:], tile, hpr, lr.group, ws.vRows[lo:hi], it.kvLo*dv, warm, it.tokens > 1)
		warm = nil
	}
}

// valueTileBF16 is valueTile for a one-token bfloat16 item: the V rows
// scoreTile gathered in place (a zero row for keys no row sees, as
// valueTile), summed by the widening kernel.
func (ws *workerScratch) valueTileBF16(lr *layerRun, it *item, n, tile int) {
	dv := lr.layer.HeadDimV
	for col := range n {
		if !ws.seenKey[col] {
			ws.vRowsBF[col] = ws.zeroRowBF
		}
	}
	hpr := it.headsPerRow
	lo, hi := n, 0
	for row := range hpr {
		if pLo, pHi := ws.pFirst[row], ws.pEnd[row]; pLo < pHi {
			lo, hi = min(lo, pLo), max(hi, pHi)
		}
	}
	if lo >= hi {
		return
	}
	cpu.AccumulateRowsHeadsBF16(ws.acc[:hpr*dv], dv, ws.scores[lo:], tile, hpr, lr.group, ws.vRowsBF[lo:hi], it.kvLo*dv)
}

// finish normalises each row: into the layer output when the request has
// one chunk, else into the partial buffers with the row's log-sum-exp
// (0 and −Inf for a row that saw nothing, so the merge weighs it 0).
func (be *Backend) finish(ws *workerScratch, lr *layerRun, it *item) {
	heads, dv := lr.layer.NumHeads, lr.layer.HeadDimV
	rp := it.rp
	for row := range it.rows {
		t, h := it.t0+row/it.headsPerRow, it.h0+row%it.headsPerRow
		src, sum := ws.acc[row*dv:(row+1)*dv], ws.rowSum[row]
		if rp.partOff < 0 {
			if sum > 0 { // else the output stays zero
				scaleInto(lr.out.Row(rp.start + t)[h*dv:(h+1)*dv], src, lr.layer.Normalizer(h, ws.rowMax[row], sum))
			}
			continue
		}
		u := (rp.partOff+t*rp.chunks+it.chunk)*heads + h
		dst := be.partOut[u*dv : (u+1)*dv]
		if sum > 0 {
			scaleInto(dst, src, 1/sum)
			be.partLSE[u] = ws.rowMax[row] + float32(math.Log(float64(sum)))
		} else {
			clear(dst)
			be.partLSE[u] = negInf
		}
	}
}
