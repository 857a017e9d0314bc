package vision

import "image"

// Gemma3Processor's defaults for the pan-and-scan settings a
// preprocessor_config.json leaves unset (null).
const (
	defaultPanAndScanMinCropSize        = 256
	defaultPanAndScanMaxNumCrops        = 4
	defaultPanAndScanMinRatioToActivate = 1.2
)

// PanAndScanSettings are the effective pan-and-scan parameters.
func (p *Processor) PanAndScanSettings() (minCrop, maxCrops int, minRatio float64) {
	c := &p.cfg
	minCrop, maxCrops, minRatio = defaultPanAndScanMinCropSize, defaultPanAndScanMaxNumCrops, defaultPanAndScanMinRatioToActivate
	if c.PanAndScanMinCropSize != nil {
		minCrop = *c.PanAndScanMinCropSize
	}
	if c.PanAndScanMaxNumCrops != nil {
		maxCrops = *c.PanAndScanMaxNumCrops
	}
	if c.PanAndScanMinRatioToActivate != nil {
		minRatio = *c.PanAndScanMinRatioToActivate
	}
	return minCrop, maxCrops, minRatio
}

// PanAndScan is Gemma 3's pan-and-scan for a w×h image: the crops the
// processor adds after the whole image, or none. An image whose aspect
// ratio reaches minRatio is cut along its long side into about as many
// crops as the ratio (rounded half up), at most one per minCrop pixels,
// then clamped to [2, maxCrops]; each crop is ceil(side/n) long, the last
// one cut at the edge; crops shorter than minCrop on either side cancel
// it. Crops are returned row-major. Settings that would cut an empty
// crop (which the processor fails to resize) are the request's error.
func (p *Processor) PanAndScan(w, h int) ([]image.Rectangle, error) {
	if !p.cfg.DoPanAndScan || p.kind() != gemmaProcessor || w <= 0 || h <= 0 {
		return nil, nil
	}
	minCrop, maxCrops, minRatio := p.PanAndScanSettings()
	nw, nh := 1, 1
	long, short, n := w, h, &nw
	if w < h {
		long, short, n = h, w, &nh
	}
	if float64(long)/float64(short) < minRatio {
		return nil, nil
	}
	// floor(long/short + 0.5) in integers: round half up.
	*n = (2*long + short) / (2 * short)
	*n = min(long/minCrop, *n)
	*n = min(maxCrops, max(2, *n))
	cw, ch := (w+nw-1)/nw, (h+nh-1)/nh
	if min(cw, ch) < minCrop {
		return nil, nil
	}
	var out []image.Rectangle
	for y := range nh {
		for x := range nw {
			// Not image.Rect, which would swap the corners of a crop
			// that starts past the edge.
			r := image.Rectangle{Min: image.Pt(x*cw, y*ch), Max: image.Pt(min((x+1)*cw, w), min((y+1)*ch, h))}
			if r.Empty() {
				return nil, inputErrorf("pan-and-scan of a %d×%d image into %d×%d crops of %d×%d leaves crop %d empty; raise pan_and_scan_min_crop_size", w, h, nw, nh, cw, ch, len(out)+1)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Crop copies the pixels inside r (which must lie within the image).
func (img RGB) Crop(r image.Rectangle) RGB {
	out := RGB{W: r.Dx(), H: r.Dy(), Pix: make([]uint8, r.Dx()*r.Dy()*3)}
	for y := range out.H {
		src := img.Pix[((r.Min.Y+y)*img.W+r.Min.X)*3:]
		copy(out.Pix[y*out.W*3:(y+1)*out.W*3], src[:out.W*3])
	}
	return out
}

// Plan is what Preprocess will make of a w×h image, found without
// touching its pixels: how many views (the image and its pan-and-scan
// crops) and the patch grid of each (Qwen2-VL; zero for fixed-size
// processors). frames > 1 plans a video of that many frames.
func (p *Processor) Plan(w, h, frames int) (views int, grid [3]int, err error) {
	c := &p.cfg
	if p.kind() == qwenProcessor {
		ps, m, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
		if on(c.DoResize) {
			if h, w, err = SmartResize(h, w, ps*m, c.MinPixels, c.MaxPixels); err != nil {
				return 0, grid, err
			}
		}
		return 1, [3]int{(max(frames, 1) + tp - 1) / tp, h / ps, w / ps}, nil
	}
	boxes, err := p.PanAndScan(w, h)
	return 1 + len(boxes), grid, err
}
