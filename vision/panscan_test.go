package vision

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func gemmaProc(t *testing.T, o Options) *Processor {
	t.Helper()
	p, err := LoadProcessor(filepath.Join(refDir(t, "gemma3_vl"), "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.With(o); err != nil {
		t.Fatal(err)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// TestPanAndScanCrops checks the crops against Gemma3ImageProcessor's
// pan_and_scan, worked by hand for each case: the number of crops is
// floor(long/short + 0.5), capped by long/min_crop_size, clamped to
// [2, max_num_crops]; each is ceil(long/n) long, the last cut at the edge;
// a crop shorter than min_crop_size on either side cancels them all.
func TestPanAndScanCrops(t *testing.T) {
	on := ptr(true)
	for _, tc := range []struct {
		name string
		w, h int
		o    Options
		want []image.Rectangle
	}{
		{"defaults: 80×64 crops would be 40 wide, under 256", 80, 64, Options{DoPanAndScan: on}, nil},
		{"pan-and-scan off", 1000, 400, Options{}, nil},
		{"1000×400: 2.5 rounds to 3 crops, the last 332 wide", 1000, 400, Options{DoPanAndScan: on},
			[]image.Rectangle{image.Rect(0, 0, 334, 400), image.Rect(334, 0, 668, 400), image.Rect(668, 0, 1000, 400)}},
		{"portrait 400×1000 crops vertically", 400, 1000, Options{DoPanAndScan: on},
			[]image.Rectangle{image.Rect(0, 0, 400, 334), image.Rect(0, 334, 400, 668), image.Rect(0, 668, 400, 1000)}},
		{"1300×256: 5 crops capped at max_num_crops 4", 1300, 256, Options{DoPanAndScan: on},
			[]image.Rectangle{image.Rect(0, 0, 325, 256), image.Rect(325, 0, 650, 256), image.Rect(650, 0, 975, 256), image.Rect(975, 0, 1300, 256)}},
		{"600×500: ratio exactly 1.2 activates, 1 crop raised to 2", 600, 500, Options{DoPanAndScan: on},
			[]image.Rectangle{image.Rect(0, 0, 300, 500), image.Rect(300, 0, 600, 500)}},
		{"590×500: ratio 1.18 does not activate", 590, 500, Options{DoPanAndScan: on}, nil},
		{"500×300: 2 crops of 250, under 256", 500, 300, Options{DoPanAndScan: on}, nil},
		{"min_ratio_to_activate 1.3 stops 600×500", 600, 500, Options{DoPanAndScan: on, PanAndScanMinRatioToActivate: ptr(1.3)}, nil},
		{"max_num_crops 2 on 1000×400", 1000, 400, Options{DoPanAndScan: on, PanAndScanMaxNumCrops: ptr(2)},
			[]image.Rectangle{image.Rect(0, 0, 500, 400), image.Rect(500, 0, 1000, 400)}},
		{"min_crop_size 32 on 80×64", 80, 64, Options{DoPanAndScan: on, PanAndScanMinCropSize: ptr(32)},
			[]image.Rectangle{image.Rect(0, 0, 40, 64), image.Rect(40, 0, 80, 64)}},
		{"min_crop_size 400 caps 1000×400 at 2 crops", 1000, 400, Options{DoPanAndScan: on, PanAndScanMinCropSize: ptr(400)},
			[]image.Rectangle{image.Rect(0, 0, 500, 400), image.Rect(500, 0, 1000, 400)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gemmaProc(t, tc.o).PanAndScan(tc.w, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("crops %v, want %v", got, tc.want)
			}
		})
	}
	// 5×1 with min_crop_size 1: 4 crops of ceil(5/4) = 2 put the last at
	// x = 6, past the image; the processor would fail on the empty crop.
	_, err := gemmaProc(t, Options{DoPanAndScan: on, PanAndScanMinCropSize: ptr(1)}).PanAndScan(5, 1)
	if !IsInputError(err) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty crop: err %v, want an input error", err)
	}
}

// TestPanAndScanPixels: with pan-and-scan, the first view is the whole
// image exactly as the processor stored it, and each crop is preprocessed
// as the same region cut out beforehand (with the image package, not
// Crop) and given as an image of its own.
func TestPanAndScanPixels(t *testing.T) {
	dir := refDir(t, "gemma3_vl")
	data, img := refImage(t, "gemma3_vl")
	views, err := gemmaProc(t, Options{DoPanAndScan: ptr(true), PanAndScanMinCropSize: ptr(32)}).Preprocess(img.RGB)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 3 {
		t.Fatalf("%d views of the 80×64 image, want the image and 2 crops", len(views))
	}
	stored, err := ReadPixelValues(filepath.Join(dir, "pixel_values.safetensors"), [3]int{})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range stored.Data {
		worst = max(worst, math.Abs(float64(stored.Data[i]-views[0].Data[i])))
	}
	if worst > 1e-5 {
		t.Errorf("whole image: max |diff| from the processor's %.3g > 1e-5", worst)
	}
	src, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	plain := gemmaProc(t, Options{})
	for i, r := range []image.Rectangle{image.Rect(0, 0, 40, 64), image.Rect(40, 0, 80, 64)} {
		var buf bytes.Buffer
		if err := png.Encode(&buf, src.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(r)); err != nil {
			t.Fatal(err)
		}
		crop, err := Decode(buf.Bytes(), DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Preprocess(crop.RGB)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(views[1+i].Data, want[0].Data) || !slices.Equal(views[1+i].Shape, []int{3, 56, 56}) {
			t.Errorf("crop %d differs from the region preprocessed as an image", i+1)
		}
	}
}

// TestOptions: unknown keys, wrong types, options of another processor
// and bad values are errors naming the key; known ones apply.
func TestOptions(t *testing.T) {
	gemma := gemmaProc(t, Options{})
	qwen, err := LoadProcessor(filepath.Join(refDir(t, "qwen2_5_vl"), "preprocessor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, json string
		proc       *Processor
		key        string // "" for no error
	}{
		{"unknown key", `{"do_pan_and_scan": true, "crop_everything": 1}`, gemma, "crop_everything"},
		{"wrong type", `{"pan_and_scan_max_num_crops": "four"}`, gemma, "pan_and_scan_max_num_crops"},
		{"not an object", `[1]`, gemma, ""},
		{"qwen option on gemma", `{"max_pixels": 50176}`, gemma, "max_pixels"},
		{"gemma option on qwen", `{"do_pan_and_scan": true}`, qwen, "do_pan_and_scan"},
		{"zero crop size", `{"pan_and_scan_min_crop_size": 0}`, gemma, "pan_and_scan_min_crop_size"},
		{"negative ratio", `{"pan_and_scan_min_ratio_to_activate": -1}`, gemma, "pan_and_scan_min_ratio_to_activate"},
		{"max below min", `{"max_pixels": 3000}`, qwen, "max_pixels"},
		{"max below one merge window", `{"min_pixels": 100, "max_pixels": 700}`, qwen, "max_pixels"},
		{"good gemma", `{"do_pan_and_scan": true, "pan_and_scan_max_num_crops": 2}`, gemma, "-"},
		{"good qwen", `{"min_pixels": 784, "max_pixels": 3136}`, qwen, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOptions([]byte(tc.json))
			if err == nil {
				_, err = tc.proc.With(o)
			}
			if tc.key == "-" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			oe, ok := err.(*OptionError)
			if !ok || (tc.key != "" && oe.Key != tc.key) {
				t.Errorf("err %v, want an OptionError naming %q", err, tc.key)
			}
		})
	}
	// A pixel budget of two 28×28 merge windows shrinks the 80×64
	// reference image from 56×84 (4×6 patches) to smart_resize's
	// floor(64/β/28)·28 × floor(80/β/28)·28 = 28×28, β = √(64·80/1568).
	o, _ := ParseOptions([]byte(`{"min_pixels": 784, "max_pixels": 1568}`))
	small, err := qwen.With(o)
	if err != nil {
		t.Fatal(err)
	}
	_, img := refImage(t, "qwen2_5_vl")
	views, err := small.Preprocess(img.RGB)
	if err != nil {
		t.Fatal(err)
	}
	if small.Fingerprint() == qwen.Fingerprint() {
		t.Error("other settings, same fingerprint")
	}
	t.Logf("max_pixels 1568: grid %v", views[0].Grid)
	if views[0].Grid != [3]int{1, 2, 2} {
		t.Errorf("max_pixels 1568: grid %v, want [1 2 2]", views[0].Grid)
	}
}
