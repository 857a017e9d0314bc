package vision

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// ProcessorConfig is the part of preprocessor_config.json the supported
// image processors read.
type ProcessorConfig struct {
	Type          string    `json:"image_processor_type"`
	DoResize      *bool     `json:"do_resize"`
	DoRescale     *bool     `json:"do_rescale"`
	DoNormalize   *bool     `json:"do_normalize"`
	RescaleFactor float64   `json:"rescale_factor"`
	Mean          []float64 `json:"image_mean"`
	Std           []float64 `json:"image_std"`
	Resample      *int      `json:"resample"`
	Size          struct {
		Height       int `json:"height"`
		Width        int `json:"width"`
		ShortestEdge int `json:"shortest_edge"` // Qwen2-VL: min_pixels
		LongestEdge  int `json:"longest_edge"`  // Qwen2-VL: max_pixels
	} `json:"size"`
	MinPixels         int `json:"min_pixels"` // older Qwen2-VL configs
	MaxPixels         int `json:"max_pixels"`
	PatchSize         int `json:"patch_size"`
	MergeSize         int `json:"merge_size"`
	TemporalPatchSize int `json:"temporal_patch_size"`
	// Gemma 3's pan-and-scan; the unset ones take Gemma3Processor's
	// defaults (panAndScanDefaults).
	DoPanAndScan                 bool     `json:"do_pan_and_scan"`
	PanAndScanMinCropSize        *int     `json:"pan_and_scan_min_crop_size"`
	PanAndScanMaxNumCrops        *int     `json:"pan_and_scan_max_num_crops"`
	PanAndScanMinRatioToActivate *float64 `json:"pan_and_scan_min_ratio_to_activate"`
	// Qwen2-VL's video processor: frames a second the video was sampled
	// at (second_per_grid_ts = temporal_patch_size / fps), and whether it
	// samples frames itself.
	FPS            float64 `json:"fps"`
	DoSampleFrames bool    `json:"do_sample_frames"`
}

// Processor preprocesses images for one model, as its Hugging Face image
// processor does.
type Processor struct {
	cfg ProcessorConfig
	// Kernel is the resampling to reproduce: torchvision's, as the
	// transformers 5 processors resize (the references' pixel values were
	// made so), or Pillow's for models prepared with transformers 4.
	Kernel Kernel
}

// Pixels is one preprocessed image.
type Pixels struct {
	// Data is the model's pixel input: Qwen2-VL's patches
	// [GridT·GridH·GridW, C·TemporalPatch·P·P] in merge-window order, or
	// Gemma 3's image [C, H, W].
	Data  []float32
	Shape []int
	// Grid is Qwen2-VL's (t, h, w) in patches (image_grid_thw); zero for
	// fixed-size processors.
	Grid [3]int
}

// LoadProcessor reads preprocessor_config.json.
func LoadProcessor(path string) (*Processor, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg ProcessorConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewProcessor(cfg)
}

// NewProcessor checks a processor configuration.
func NewProcessor(cfg ProcessorConfig) (*Processor, error) {
	switch cfg.Type {
	case "Qwen2VLVideoProcessor", "Qwen2_5_VLVideoProcessor":
		// The class defaults of what a video_preprocessor_config.json may
		// leave out.
		cfg.PatchSize, cfg.MergeSize, cfg.TemporalPatchSize = cmp.Or(cfg.PatchSize, 14), cmp.Or(cfg.MergeSize, 2), cmp.Or(cfg.TemporalPatchSize, 2)
		cfg.MinPixels = cmp.Or(cfg.MinPixels, cfg.Size.ShortestEdge, 128*28*28)
		cfg.MaxPixels = cmp.Or(cfg.MaxPixels, cfg.Size.LongestEdge, 768*28*28)
		if len(cfg.Mean) == 0 && len(cfg.Std) == 0 {
			cfg.Mean, cfg.Std = []float64{0.48145466, 0.4578275, 0.40821073}, []float64{0.26862954, 0.26130258, 0.27577711}
		}
		fallthrough
	case "Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast":
		if cfg.MinPixels == 0 {
			cfg.MinPixels = cfg.Size.ShortestEdge
		}
		if cfg.MaxPixels == 0 {
			cfg.MaxPixels = cfg.Size.LongestEdge
		}
		if cfg.PatchSize <= 0 || cfg.MergeSize <= 0 || cfg.TemporalPatchSize <= 0 || cfg.MinPixels <= 0 || cfg.MaxPixels < cfg.MinPixels {
			return nil, fmt.Errorf("%s: patch_size, merge_size, temporal_patch_size and min/max pixels must be positive (got %+v)", cfg.Type, cfg)
		}
	case "Gemma3ImageProcessor", "Gemma3ImageProcessorFast":
		if cfg.Size.Height <= 0 || cfg.Size.Width <= 0 {
			return nil, fmt.Errorf("%s: size.height and size.width must be positive", cfg.Type)
		}
	default:
		return nil, fmt.Errorf("image processor %q is not supported (Qwen2VLImageProcessor, Qwen2VLVideoProcessor, Gemma3ImageProcessor)", cfg.Type)
	}
	if len(cfg.Mean) != 3 || len(cfg.Std) != 3 {
		return nil, fmt.Errorf("%s: image_mean and image_std need 3 values", cfg.Type)
	}
	if cfg.Resample == nil {
		r := int(Bicubic)
		cfg.Resample = &r
	}
	if *cfg.Resample < 0 || *cfg.Resample > 3 {
		return nil, fmt.Errorf("%s: resample %d is not supported (0-3)", cfg.Type, *cfg.Resample)
	}
	if cfg.RescaleFactor == 0 {
		cfg.RescaleFactor = 1.0 / 255
	}
	if err := cfg.checkOptions(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Type, err)
	}
	return &Processor{cfg: cfg}, nil
}

func on(b *bool) bool { return b == nil || *b }

// Preprocess turns an RGB image into the model's pixel inputs: the whole
// image, then, with Gemma 3's pan-and-scan, its crops (each read by the
// model as an image of its own).
func (p *Processor) Preprocess(img RGB) ([]Pixels, error) {
	c := &p.cfg
	if c.PatchSize > 0 && c.MergeSize > 0 {
		px, err := p.qwen2VL(img)
		if err != nil {
			return nil, err
		}
		return []Pixels{px}, nil
	}
	views := []RGB{img}
	if c.DoPanAndScan {
		boxes, err := p.PanAndScan(img.W, img.H)
		if err != nil {
			return nil, err
		}
		for _, box := range boxes {
			views = append(views, img.Crop(box))
		}
	}
	out := make([]Pixels, len(views))
	for i, v := range views {
		if on(c.DoResize) {
			v = Resize(v, c.Size.Width, c.Size.Height, Filter(*c.Resample), p.Kernel)
		}
		out[i] = Pixels{Data: p.normalizedCHW(v), Shape: []int{3, v.H, v.W}}
	}
	return out, nil
}

// normalizedCHW rescales and normalises in float32 as the processors do
// (rescale in float64 then cast, normalise in float32), channels first.
func (p *Processor) normalizedCHW(img RGB) []float32 {
	c := &p.cfg
	out := make([]float32, 3*img.W*img.H)
	plane := img.W * img.H
	for ch := range 3 {
		mean, std := float32(c.Mean[ch]), float32(c.Std[ch])
		for i := range plane {
			v := float32(img.Pix[i*3+ch])
			if on(c.DoRescale) {
				v = float32(float64(img.Pix[i*3+ch]) * c.RescaleFactor)
			}
			if on(c.DoNormalize) {
				v = (v - mean) / std
			}
			out[ch*plane+i] = v
		}
	}
	return out
}

// SmartResize is Qwen2-VL's target size: each side a multiple of factor
// (patch·merge), the area within [minPixels, maxPixels], the aspect ratio
// kept as nearly as that allows. Python's round (half to even) is used.
func SmartResize(height, width, factor, minPixels, maxPixels int) (int, int, error) {
	if min(height, width) <= 0 {
		return 0, 0, inputErrorf("image has no pixels")
	}
	if max(height, width)/min(height, width) > 200 {
		return 0, 0, inputErrorf("image aspect ratio %d×%d is over 200", width, height)
	}
	f := float64(factor)
	h := int(math.RoundToEven(float64(height)/f)) * factor
	w := int(math.RoundToEven(float64(width)/f)) * factor
	switch {
	case h*w > maxPixels:
		beta := math.Sqrt(float64(height*width) / float64(maxPixels))
		h = max(factor, int(math.Floor(float64(height)/beta/f))*factor)
		w = max(factor, int(math.Floor(float64(width)/beta/f))*factor)
	case h*w < minPixels:
		beta := math.Sqrt(float64(minPixels) / float64(height*width))
		h = int(math.Ceil(float64(height)*beta/f)) * factor
		w = int(math.Ceil(float64(width)*beta/f)) * factor
	}
	return h, w, nil
}

// qwen2VL preprocesses a still image: a video of one frame, which fills
// the temporal patch by repeating, as Qwen2VLImageProcessor tiles it.
func (p *Processor) qwen2VL(img RGB) (Pixels, error) { return p.qwen2VLFrames([]RGB{img}) }

// PreprocessVideo turns a video, given as its frames (images of one
// size), into Qwen2-VL's pixel input as its video processor does: each
// frame smart-resized and normalised, the last repeated to fill the last
// temporal patch, laid out as an image's patches with each temporal patch
// holding consecutive frames. The frames are taken as given: a processor
// that samples frames itself (do_sample_frames) needs the video's timing.
func (p *Processor) PreprocessVideo(frames []RGB) (Pixels, error) {
	if p.kind() != qwenProcessor {
		return Pixels{}, inputErrorf("this model's processor (%s) reads no video", p.cfg.Type)
	}
	if p.cfg.DoSampleFrames {
		return Pixels{}, inputErrorf("the video processor samples frames itself (do_sample_frames), which needs the video's timing; frames given as images cannot be sampled")
	}
	if len(frames) == 0 {
		return Pixels{}, inputErrorf("the video has no frames")
	}
	for i, f := range frames[1:] {
		if f.W != frames[0].W || f.H != frames[0].H {
			return Pixels{}, inputErrorf("video frame %d is %d×%d, frame 1 is %d×%d: a video's frames must be of one size", i+2, f.W, f.H, frames[0].W, frames[0].H)
		}
	}
	return p.qwen2VLFrames(frames)
}

// SecondsPerGrid is the seconds of video in one temporal patch:
// temporal_patch_size / fps, fps 2 unless the video processor's
// configuration says otherwise (as Qwen2.5-VL's processor computes
// second_per_grid_ts).
func (p *Processor) SecondsPerGrid() float64 {
	return float64(p.cfg.TemporalPatchSize) / cmp.Or(p.cfg.FPS, 2)
}

// qwen2VLFrames resizes the frames to the smart size, normalises them,
// pads them to whole temporal patches with the last frame, and lays the
// patches out as Qwen2VLImageProcessor: rows (t, h/m, w/m, m, m), so each
// merge window's m² patches are consecutive; columns (channel, frame in
// the temporal patch, py, px).
func (p *Processor) qwen2VLFrames(frames []RGB) (Pixels, error) {
	c := &p.cfg
	ps, m, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
	h, w := frames[0].H, frames[0].W
	if on(c.DoResize) {
		var err error
		if h, w, err = SmartResize(h, w, ps*m, c.MinPixels, c.MaxPixels); err != nil {
			return Pixels{}, err
		}
	} else if h%(ps*m) != 0 || w%(ps*m) != 0 {
		return Pixels{}, inputErrorf("image %d×%d is not a multiple of %d and the processor does not resize", w, h, ps*m)
	}
	chw := make([][]float32, len(frames))
	for i, f := range frames {
		if on(c.DoResize) {
			f = Resize(f, w, h, Filter(*c.Resample), p.Kernel)
		}
		chw[i] = p.normalizedCHW(f)
	}
	for len(chw)%tp != 0 {
		chw = append(chw, chw[len(chw)-1])
	}
	gt, gh, gw := len(chw)/tp, h/ps, w/ps
	cols := 3 * tp * ps * ps
	out := make([]float32, gt*gh*gw*cols)
	row := 0
	for t := range gt {
		for bh := range gh / m {
			for bw := range gw / m {
				for mh := range m {
					for mw := range m {
						py0, px0 := (bh*m+mh)*ps, (bw*m+mw)*ps
						dst := out[row*cols:]
						i := 0
						for ch := range 3 {
							for f := range tp {
								frame := chw[t*tp+f]
								for py := range ps {
									src := frame[ch*h*w+(py0+py)*w+px0:]
									copy(dst[i:i+ps], src[:ps])
									i += ps
								}
							}
						}
						row++
					}
				}
			}
		}
	}
	return Pixels{Data: out, Shape: []int{gt * gh * gw, cols}, Grid: [3]int{gt, gh, gw}}, nil
}
