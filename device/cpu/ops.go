package cpu

import (
	"math"

	"github.com/gosling-ai/gosling/tensor"
)

// Element-wise operations. Each runs the active kernel set's vector code
// over the longest prefix that is a multiple of its width and finishes in
// Go.

// split returns the length of x the vector kernels take.
func split(n int) (vec int, vk *vecKernels) {
	vk = &kernels().vec
	return n - n%vk.width, vk
}

// Dot is Σ a[i]·b[i] with float32 accumulation.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	// Attention calls this once per key and head on short rows (a head
	// of 64-128 values): go straight to the assembly when the length is a
	// whole number of its blocks, without the indirect call and the tail.
	if len(a)%16 == 0 && len(a) > 0 && kernels().asmDot {
		return asmDot(&a[0], &b[0], len(a))
	}
	n, vk := split(len(a))
	var s float32
	if n > 0 {
		s = vk.dot(a[:n], b[:n])
	}
	return s + goDot(a[n:], b[n:])
}

// Axpy computes dst += a·x.
func Axpy(dst []float32, a float32, x []float32) {
	dst = dst[:len(x)]
	n, vk := split(len(x))
	if n > 0 {
		vk.axpy(dst[:n], a, x[:n])
	}
	goAxpy(dst[n:], a, x[n:])
}

// RMSNorm normalises each row of x in place of out: out = x/rms(x) * weight.
// x and out may alias. Accumulation is float64 for stability across widths.
func RMSNorm(out, x tensor.T, weight []float32, eps float64) {
	rmsNormRows(out.HostData(), x.HostData(), weight[:x.Cols()], eps)
}

// rmsNormRows is RMSNorm over the rows of len(weight) values of x, into
// out.
func rmsNormRows(out, x, weight []float32, eps float64) {
	cols := len(weight)
	n, vk := split(cols)
	for r := range len(x) / cols {
		xr := x[r*cols : (r+1)*cols]
		or := out[r*cols : (r+1)*cols]
		var ss float64
		if n > 0 {
			ss = vk.sumSquares(xr[:n])
		}
		ss += goSumSquares(xr[n:])
		inv := float32(1 / math.Sqrt(ss/float64(cols)+eps))
		if n > 0 {
			vk.scaleMul(or[:n], xr[:n], weight[:n], inv)
		}
		goScaleMul(or[n:], xr[n:], weight[n:cols], inv)
	}
}

// SiLUMul computes gate = silu(gate) * up, in place in gate.
func SiLUMul(gate, up tensor.T) { siluMul(gate.HostData(), up.HostData()) }

// siluMul is g = silu(g)·u over len(g) values.
func siluMul(g, u []float32) {
	u = u[:len(g)]
	n, vk := split(len(g))
	if n > 0 {
		vk.siluMul(g[:n], u[:n])
	}
	goSiLUMul(g[n:], u[n:])
}

// Add computes dst += src.
func Add(dst, src tensor.T) {
	d, s := dst.HostData()[:len(src.HostData())], src.HostData()
	n, vk := split(len(s))
	if n > 0 {
		vk.add(d[:n], s[:n])
	}
	goAdd(d[n:], s[n:])
}

// Exp computes dst[i] = e^src[i] in float32 (within 2 ulp; 0 below -87.3,
// where the result would be subnormal). dst and src may alias.
func Exp(dst, src []float32) {
	dst = dst[:len(src)]
	n, vk := split(len(src))
	if n > 0 {
		vk.exp(dst[:n], src[:n])
	}
	goExp(dst[n:], src[n:])
}

// Max is the largest value of x (-Inf when empty).
func Max(x []float32) float32 {
	n, vk := split(len(x))
	m := goMax(x[n:])
	if n > 0 {
		m = max(m, vk.max(x[:n]))
	}
	return m
}

// Softmax replaces x by softmax(x) in place and returns log Σ e^x (the
// log-sum-exp, for logprobs and for merging attention partials).
func Softmax(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	m := Max(x)
	if math.IsInf(float64(m), -1) {
		for i := range x {
			x[i] = 0
		}
		return m
	}
	n, vk := split(len(x))
	var sum float32
	if n > 0 {
		sum = vk.expSubSum(x[:n], m)
	}
	sum += goExpSubSum(x[n:], m)
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
	return m + float32(math.Log(float64(sum)))
}
