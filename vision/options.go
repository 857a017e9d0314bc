package vision

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Options override a processor's preprocessor_config.json, as the Hugging
// Face processors' keyword arguments do (vLLM's mm_processor_kwargs):
// Qwen2-VL's pixel budget per image, Gemma 3's pan-and-scan. A nil field
// keeps the configured value.
type Options struct {
	MinPixels                    *int     `json:"min_pixels,omitempty"`
	MaxPixels                    *int     `json:"max_pixels,omitempty"`
	DoPanAndScan                 *bool    `json:"do_pan_and_scan,omitempty"`
	PanAndScanMinCropSize        *int     `json:"pan_and_scan_min_crop_size,omitempty"`
	PanAndScanMaxNumCrops        *int     `json:"pan_and_scan_max_num_crops,omitempty"`
	PanAndScanMinRatioToActivate *float64 `json:"pan_and_scan_min_ratio_to_activate,omitempty"`
}

// OptionError is an option that cannot be used; Key names it.
type OptionError struct {
	Key string
	Msg string
}

func (e *OptionError) Error() string { return e.Key + ": " + e.Msg }

func optionErrorf(key, format string, args ...any) error {
	return &OptionError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// optionKeys are the keys ParseOptions knows, and which processor reads each.
var optionKeys = map[string]string{
	"min_pixels":                         qwenProcessor,
	"max_pixels":                         qwenProcessor,
	"do_pan_and_scan":                    gemmaProcessor,
	"pan_and_scan_min_crop_size":         gemmaProcessor,
	"pan_and_scan_max_num_crops":         gemmaProcessor,
	"pan_and_scan_min_ratio_to_activate": gemmaProcessor,
}

const (
	qwenProcessor  = "Qwen2VLImageProcessor"
	gemmaProcessor = "Gemma3ImageProcessor"
)

// ParseOptions reads a JSON object of processor options. An unknown key
// is an error naming it: an option accepted and ignored would change
// nothing the client asked for.
func ParseOptions(data []byte) (Options, error) {
	var o Options
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		return o, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return o, optionErrorf("", "must be a JSON object of image processor options: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if _, ok := optionKeys[k]; !ok {
			return o, optionErrorf(k, "unknown image processor option (known: %v)", slices.Sorted(maps.Keys(optionKeys)))
		}
	}
	if err := json.Unmarshal(data, &o); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return o, optionErrorf(te.Field, "must be %s, got %s", te.Type, te.Value)
		}
		return o, optionErrorf("", "%v", err)
	}
	return o, nil
}

// IsZero reports whether o overrides nothing.
func (o Options) IsZero() bool { return o == Options{} }

// With returns the processor with o applied, or an error naming the first
// option this processor does not read or whose value it cannot use.
func (p *Processor) With(o Options) (*Processor, error) {
	if o.IsZero() {
		return p, nil
	}
	kind := p.kind()
	data, _ := json.Marshal(o)
	var set map[string]json.RawMessage
	_ = json.Unmarshal(data, &set)
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if optionKeys[k] != kind {
			return nil, optionErrorf(k, "this model's image processor (%s) has no such option", p.cfg.Type)
		}
	}
	cfg := p.cfg
	if o.MinPixels != nil {
		cfg.MinPixels = *o.MinPixels
	}
	if o.MaxPixels != nil {
		cfg.MaxPixels = *o.MaxPixels
	}
	if o.DoPanAndScan != nil {
		cfg.DoPanAndScan = *o.DoPanAndScan
	}
	if o.PanAndScanMinCropSize != nil {
		cfg.PanAndScanMinCropSize = o.PanAndScanMinCropSize
	}
	if o.PanAndScanMaxNumCrops != nil {
		cfg.PanAndScanMaxNumCrops = o.PanAndScanMaxNumCrops
	}
	if o.PanAndScanMinRatioToActivate != nil {
		cfg.PanAndScanMinRatioToActivate = o.PanAndScanMinRatioToActivate
	}
	if err := cfg.checkOptions(); err != nil {
		return nil, err
	}
	return &Processor{cfg: cfg, Kernel: p.Kernel}, nil
}

// Type is the processor's image_processor_type.
func (p *Processor) Type() string { return p.cfg.Type }

// kind is the processor family an option belongs to.
func (p *Processor) kind() string {
	if p.cfg.PatchSize > 0 && p.cfg.MergeSize > 0 {
		return qwenProcessor
	}
	return gemmaProcessor
}

// checkOptions checks the values options can set.
func (c *ProcessorConfig) checkOptions() error {
	if c.PatchSize > 0 && c.MergeSize > 0 {
		factor := c.PatchSize * c.MergeSize
		if c.MinPixels <= 0 {
			return optionErrorf("min_pixels", "must be positive, got %d", c.MinPixels)
		}
		if c.MaxPixels < c.MinPixels {
			return optionErrorf("max_pixels", "%d is below min_pixels %d", c.MaxPixels, c.MinPixels)
		}
		// Below one merge window's area smart resize still returns one
		// window per side: the budget would not be what was asked.
		if c.MaxPixels < factor*factor {
			return optionErrorf("max_pixels", "%d is below one %d×%d merge window", c.MaxPixels, factor, factor)
		}
		return nil
	}
	if v := c.PanAndScanMinCropSize; v != nil && *v <= 0 {
		return optionErrorf("pan_and_scan_min_crop_size", "must be positive, got %d", *v)
	}
	if v := c.PanAndScanMaxNumCrops; v != nil && *v <= 0 {
		return optionErrorf("pan_and_scan_max_num_crops", "must be positive, got %d", *v)
	}
	if v := c.PanAndScanMinRatioToActivate; v != nil && (*v <= 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
		return optionErrorf("pan_and_scan_min_ratio_to_activate", "must be a positive number, got %v", *v)
	}
	return nil
}

// MaxPixelsPerImage is the most pixels one image is resized to under the
// processor's settings (0: the processor resizes to a fixed size or not
// at all, within the input's own size).
func (p *Processor) MaxPixelsPerImage() int {
	if p.kind() == qwenProcessor && on(p.cfg.DoResize) {
		return p.cfg.MaxPixels
	}
	return 0
}

// Fingerprint identifies the processor's settings: images preprocessed by
// processors with equal fingerprints are equal when the images are.
func (p *Processor) Fingerprint() [32]byte {
	data, _ := json.Marshal(struct {
		Cfg    ProcessorConfig
		Kernel Kernel
	}{p.cfg, p.Kernel})
	return sha256.Sum256(data)
}
