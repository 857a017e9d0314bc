package splitkv

import (
	"math"

	"github.com/gosling-ai/gosling/attention"
)

// workerScratch is one worker's private state; rows are the item's query
// rows, (token, head) with the head fastest.
type workerScratch struct {
	kv      attention.SeqKV // holds the pool's dtype-conversion scratch
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
	vRows   [][]float32     // [keyTile]: the tile's V rows (pool views, vTile, or zeroRow)
	vTile   []float32       // [keyTile, VStride]: decoded V rows when the pool's are not views
	zeroRow []float32       // [VStride]: stands in for keys no row sees
}

func (ws *workerScratch) size(rows, tokens, keyTile, dimV, vStride int) {
	ws.pFirst = grow(ws.pFirst, rows)
	ws.pEnd = grow(ws.pEnd, rows)
	ws.vRows = grow(ws.vRows, keyTile)
	ws.vTile = grow(ws.vTile, keyTile*vStride)
	ws.zeroRow = grow(ws.zeroRow, vStride) // never written: stays zero
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
		ws.kv.Reset(lr.k, lr.v, lr.layer, lr.b, it.req)
		tile := be.tune.keyTile
		for j0 := first; j0 < last; j0 += tile {
			n := min(tile, last-j0)
			ws.scoreTile(lr, &it, j0, n, tile)
			ws.softmaxTile(&it, n, tile, dv)
			ws.valueTile(lr, &it, j0, n, tile)
		}
	}
	be.finish(ws, lr, &it)
}

// scoreTile writes the scaled (and soft-capped) scores of keys [j0, j0+n)
// into ws.scores[row, 0:n], −Inf where the row's token does not see the
// key. Each key's K row is read once for all rows.
func (ws *workerScratch) scoreTile(lr *layerRun, it *item, j0, n, tile int) {
	layer := lr.layer
	dk, group := layer.HeadDim, lr.group
	qWidth := layer.NumHeads * dk
	for col := range n {
		j := j0 + col
		var kRow []float32
		for ti := range it.tokens {
			sc := ws.scores[ti*it.headsPerRow*tile+col:]
			if j < ws.visLo[ti] || j >= ws.visHi[ti] || (ws.masks[ti] != nil && !ws.masks[ti][j]) {
				for hr := range it.headsPerRow {
					sc[hr*tile] = negInf
				}
				continue
			}
			if kRow == nil {
				kRow = ws.kv.K(j, 1)
			}
			qAt := (it.rp.start+it.t0+ti)*qWidth + it.h0*dk
			qRows := lr.q.Data[qAt : qAt+it.headsPerRow*dk]
			for hr := range it.headsPerRow {
				kvh := it.kvLo + hr/group
				s := dot(qRows[hr*dk:(hr+1)*dk], kRow[kvh*dk:(kvh+1)*dk]) * layer.Scale
				if cp := layer.LogitSoftcap; cp > 0 {
					s = cp * float32(math.Tanh(float64(s/cp)))
				}
				sc[hr*tile] = s
			}
		}
		ws.seenKey[col] = kRow != nil
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
// registers (pvTile).
func (ws *workerScratch) valueTile(lr *layerRun, it *item, j0, n, tile int) {
	dv := lr.layer.HeadDimV
	vStride := ws.kv.VStride()
	for col := range n {
		if !ws.seenKey[col] {
			ws.vRows[col] = ws.zeroRow
			continue
		}
		vRow := ws.kv.V(j0+col, 1)
		if !lr.vViews { // decoded into the SeqKV's scratch, which the next read reuses
			dst := ws.vTile[col*vStride : (col+1)*vStride]
			copy(dst, vRow)
			vRow = dst
		}
		ws.vRows[col] = vRow
	}
	for row := range it.rows {
		pLo, pHi := ws.pFirst[row], ws.pEnd[row]
		if pLo >= pHi {
			continue
		}
		kvh := it.kvLo + (row%it.headsPerRow)/lr.group
		pvTile(ws.acc[row*dv:(row+1)*dv], ws.scores[row*tile+pLo:row*tile+pHi], ws.vRows[pLo:pHi], kvh*dv)
	}
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
				scaleInto(lr.out.Row(rp.start + t)[h*dv:(h+1)*dv], src, 1/sum)
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
