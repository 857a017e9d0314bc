package vision

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gosling-ai/gosling/internal/shared"
)

func refDir(t *testing.T, name string) string {
	t.Helper()
	return shared.Path(t, "models/reference-tiny/"+name)
}

// refImage reads a reference's image.png: its bytes and decoded.
func refImage(t *testing.T, name string) ([]byte, *Image) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(refDir(t, name), "image.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := Decode(data, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return data, img
}

// TestPixelsMatchProcessor preprocesses the references' image.png and
// compares with the pixel_values the Hugging Face processor stored.
func TestPixelsMatchProcessor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int
		grid  [3]int
	}{
		{"qwen2_5_vl", []int{24, 1176}, [3]int{1, 4, 6}},
		{"gemma3_vl", []int{3, 56, 56}, [3]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := refDir(t, tc.name)
			proc, err := LoadProcessor(filepath.Join(dir, "preprocessor_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			_, img := refImage(t, tc.name)
			views, err := proc.Preprocess(img.RGB)
			if err != nil {
				t.Fatal(err)
			}
			if len(views) != 1 {
				t.Fatalf("%d views without pan-and-scan, want 1", len(views))
			}
			px := views[0]
			if px.Grid != tc.grid || !slices.Equal(px.Shape, tc.shape) {
				t.Fatalf("shape %v grid %v, want %v %v", px.Shape, px.Grid, tc.shape, tc.grid)
			}
			stored, err := ReadPixelValues(filepath.Join(dir, "pixel_values.safetensors"), tc.grid)
			if err != nil {
				t.Fatal(err)
			}
			want := stored.Data
			if len(want) != len(px.Data) {
				t.Fatalf("%d values, reference has %d", len(px.Data), len(want))
			}
			var maxDiff, sum float64
			for i := range want {
				d := math.Abs(float64(want[i] - px.Data[i]))
				maxDiff = max(maxDiff, d)
				sum += d
			}
			t.Logf("%s pixel values: max |diff| %.3g, mean %.3g over %d values", tc.name, maxDiff, sum/float64(len(want)), len(want))
			if maxDiff > 1e-5 {
				t.Errorf("max |diff| %.3g > 1e-5: the resampling differs from the processor's", maxDiff)
			}
		})
	}
}
