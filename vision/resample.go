package vision

import "math"

// Resampling as the Hugging Face image processors do it for 8-bit RGB
// images: through torch's uint8 antialiased resize (transformers 5) or
// Pillow's Image.resize (transformers 4's slow processors). Both are a
// separable convolution, horizontal pass first, whose filter support
// widens by the scale when shrinking (antialiasing), with fixed-point
// weights and each pass rounded back to 8 bits. Matching that bit for bit
// matters: one 8-bit step is 0.015 after CLIP normalisation, more than the
// 1e-2 the pixel values must agree within, and computing in floating point
// instead moves a fifth of the values by a step.

// Filter is a Pillow resampling filter, numbered as PIL.Image.Resampling
// (and preprocessor_config.json's "resample").
type Filter int

const (
	Nearest  Filter = 0
	Lanczos  Filter = 1
	Bilinear Filter = 2
	Bicubic  Filter = 3
)

// precisionBits is Pillow's fixed-point precision for 8-bit images: 32
// bits less 8 for the value and 2 for the sign and headroom.
const precisionBits = 32 - 8 - 2

func (f Filter) support() float64 {
	switch f {
	case Bilinear:
		return 1
	case Bicubic:
		return 2
	case Lanczos:
		return 3
	}
	return 0
}

func (f Filter) weight(x float64) float64 {
	switch f {
	case Bilinear:
		x = math.Abs(x)
		if x < 1 {
			return 1 - x
		}
	case Bicubic:
		const a = -0.5
		x = math.Abs(x)
		if x < 1 {
			return ((a+2)*x-(a+3))*x*x + 1
		}
		if x < 2 {
			return (((x-5)*x+8)*x - 4) * a
		}
	case Lanczos:
		if -3 <= x && x < 3 {
			return sinc(x) * sinc(x/3)
		}
	}
	return 0
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x *= math.Pi
	return math.Sin(x) / x
}

// coeffs are one pass's fixed-point weights: output i reads inputs
// [start[i], start[i]+count[i]) with weights w[i*ksize:].
type coeffs struct {
	ksize        int
	precision    uint // fixed-point bits of w
	start, count []int
	w            []int32
}

// precompute computes the weights for resizing inSize samples to outSize
// as Pillow's precompute_coeffs does (torch's _compute_weights_aa is the
// same arithmetic), then rounds them to fixed point: with Pillow's fixed
// 22 bits (normalize_coeffs_8bpc), or as torch's uint8 kernels do, with
// the most bits that keep the largest weight of the pass within int16
// (_compute_index_ranges_int16_weights).
func precompute(inSize, outSize int, f Filter, kind Kernel) coeffs {
	scale := float64(inSize) / float64(outSize)
	filterScale := max(scale, 1)
	support := f.support() * filterScale
	ksize := int(math.Ceil(support))*2 + 1
	c := coeffs{ksize: ksize, start: make([]int, outSize), count: make([]int, outSize), w: make([]int32, outSize*ksize)}
	k := make([]float64, outSize*ksize)
	ss := 1 / filterScale // both multiply by the reciprocal; dividing can round differently
	maxWeight := 0.0
	for i := range outSize {
		center := (float64(i) + 0.5) * scale
		lo := max(int(center-support+0.5), 0) // truncation toward zero after adding 0.5, as in C
		hi := min(int(center+support+0.5), inSize)
		n := hi - lo
		row := k[i*ksize:]
		total := 0.0
		for x := range n {
			row[x] = f.weight((float64(x+lo) - center + 0.5) * ss)
			total += row[x]
		}
		for x := range n {
			if total != 0 {
				row[x] /= total
			}
			maxWeight = max(maxWeight, row[x])
		}
		c.start[i], c.count[i] = lo, n
	}
	c.precision = precisionBits
	if kind == Torchvision {
		c.precision = 0
		for ; c.precision < 22; c.precision++ {
			if int(0.5+maxWeight*float64(int(1)<<(c.precision+1))) >= 1<<15 {
				break
			}
		}
	}
	for i, v := range k {
		v *= float64(int(1) << c.precision)
		if v < 0 {
			c.w[i] = int32(v - 0.5)
		} else {
			c.w[i] = int32(v + 0.5)
		}
	}
	return c
}

func clip8(v int64, precision uint) uint8 {
	v >>= precision
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// RGB is an 8-bit RGB image, row-major, 3 bytes a pixel.
type RGB struct {
	W, H int
	Pix  []uint8 // [H, W, 3]
}

// Kernel says whose 8-bit resampling to reproduce. Both convolve
// separably, horizontal pass first, rounding to 8 bits after each pass;
// they differ only in the fixed-point precision of the weights.
type Kernel int

const (
	// Torchvision is torch's uint8 antialiased resize, used by the
	// torchvision-backed image processors (the default in transformers 5).
	Torchvision Kernel = iota
	// Pillow is Image.resize, used by transformers 4's slow processors.
	Pillow
)

// Resize resamples img to w×h as kind's resize does (Pillow:
// Image.resize(size, filter), no reducing_gap; torchvision:
// resize(antialias=True) on a uint8 tensor).
func Resize(img RGB, w, h int, f Filter, kind Kernel) RGB {
	if f == Nearest {
		return resizeNearest(img, w, h)
	}
	if w != img.W {
		img = resizeHorizontal(img, w, f, kind)
	}
	if h != img.H {
		img = resizeVertical(img, h, f, kind)
	}
	return img
}

func resizeHorizontal(img RGB, w int, f Filter, kind Kernel) RGB {
	c := precompute(img.W, w, f, kind)
	out := RGB{W: w, H: img.H, Pix: make([]uint8, w*img.H*3)}
	for y := range img.H {
		row := img.Pix[y*img.W*3:]
		dst := out.Pix[y*w*3:]
		for x := range w {
			k := c.w[x*c.ksize:]
			for ch := range 3 {
				acc := int64(1) << (c.precision - 1)
				for j := range c.count[x] {
					acc += int64(row[(c.start[x]+j)*3+ch]) * int64(k[j])
				}
				dst[x*3+ch] = clip8(acc, c.precision)
			}
		}
	}
	return out
}

func resizeVertical(img RGB, h int, f Filter, kind Kernel) RGB {
	c := precompute(img.H, h, f, kind)
	out := RGB{W: img.W, H: h, Pix: make([]uint8, img.W*h*3)}
	stride := img.W * 3
	for y := range h {
		k := c.w[y*c.ksize:]
		dst := out.Pix[y*stride:]
		for i := range stride {
			acc := int64(1) << (c.precision - 1)
			for j := range c.count[y] {
				acc += int64(img.Pix[(c.start[y]+j)*stride+i]) * int64(k[j])
			}
			dst[i] = clip8(acc, c.precision)
		}
	}
	return out
}

// resizeNearest picks, as Pillow does, the source pixel under each output
// pixel's centre.
func resizeNearest(img RGB, w, h int) RGB {
	out := RGB{W: w, H: h, Pix: make([]uint8, w*h*3)}
	for y := range h {
		sy := min(int((float64(y)+0.5)*float64(img.H)/float64(h)), img.H-1)
		for x := range w {
			sx := min(int((float64(x)+0.5)*float64(img.W)/float64(w)), img.W-1)
			copy(out.Pix[(y*w+x)*3:(y*w+x)*3+3], img.Pix[(sy*img.W+sx)*3:])
		}
	}
	return out
}
