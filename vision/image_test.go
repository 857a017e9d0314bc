package vision

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"
)

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeFormats(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	src.Set(0, 0, color.NRGBA{10, 20, 30, 255})
	src.Set(1, 0, color.NRGBA{200, 100, 0, 0}) // transparent: white after convert_rgb
	var jpg, gf bytes.Buffer
	if err := jpeg.Encode(&jpg, src, nil); err != nil {
		t.Fatal(err)
	}
	pal := image.NewPaletted(image.Rect(0, 0, 3, 2), color.Palette{color.Black, color.White})
	if err := gif.Encode(&gf, pal, nil); err != nil {
		t.Fatal(err)
	}
	// A 1×1 lossless WebP (the widely used feature-detection image).
	webp, _ := base64.StdEncoding.DecodeString("UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==")
	for _, tc := range []struct {
		name string
		data []byte
		w, h int
	}{{"png", encodePNG(t, src), 3, 2}, {"jpeg", jpg.Bytes(), 3, 2}, {"gif", gf.Bytes(), 3, 2}, {"webp", webp, 1, 1}} {
		img, err := Decode(tc.data, DefaultLimits)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if img.W != tc.w || img.H != tc.h || len(img.Pix) != tc.w*tc.h*3 {
			t.Fatalf("%s: %d×%d with %d bytes", tc.name, img.W, img.H, len(img.Pix))
		}
	}
	img, _ := Decode(encodePNG(t, src), DefaultLimits)
	if got := img.Pix[:6]; !bytes.Equal(got, []byte{10, 20, 30, 255, 255, 255}) {
		t.Fatalf("RGB conversion: %v, want opaque pixel kept and transparent one white", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encodePNG(t, image.NewGray(image.Rect(0, 0, 8, 8)))
	// A 20000×20000 PNG: the header alone says so, nothing is decoded.
	huge := encodePNG(t, image.NewGray(image.Rect(0, 0, 1, 1)))
	huge = bytes.Clone(huge)
	copy(huge[16:24], []byte{0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20}) // IHDR width, height
	binary.BigEndian.PutUint32(huge[29:33], crc32.ChecksumIEEE(huge[12:29]))
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`)
	for _, tc := range []struct {
		name string
		data []byte
		lim  Limits
		want string
	}{
		{"truncated png", good[:len(good)/2], DefaultLimits, "cannot decode"},
		{"svg", svg, DefaultLimits, "cannot decode image"},
		{"empty", nil, DefaultLimits, "cannot decode image"},
		{"too many pixels", huge, DefaultLimits, "over the limit of 50000000 pixels"},
		{"too many bytes", good, Limits{MaxBytes: 10}, "over the limit of 10 bytes"},
	} {
		_, err := Decode(tc.data, tc.lim)
		if err == nil || !IsInputError(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want an input error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestDecodeDataURL(t *testing.T) {
	data := encodePNG(t, image.NewGray(image.Rect(0, 0, 4, 4)))
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(data)
	img, err := DecodeDataURL(url, DefaultLimits)
	if err != nil || img.W != 4 {
		t.Fatalf("%v %v", img, err)
	}
	for _, bad := range []string{"https://example.com/a.png", "data:image/png;base64", "data:image/png,abc", "data:image/png;base64,@@@"} {
		if _, err := DecodeDataURL(bad, DefaultLimits); !IsInputError(err) {
			t.Errorf("%q: %v, want an input error", bad, err)
		}
	}
	if _, err := DecodeDataURL(url, Limits{MaxBytes: 16}); err == nil || !strings.Contains(err.Error(), "limit of 16 bytes") {
		t.Errorf("oversized data URL: %v", err)
	}
}

func TestSmartResize(t *testing.T) {
	for _, tc := range []struct{ h, w, minP, maxP, wantH, wantW int }{
		{64, 80, 3136, 12544, 56, 84},       // the reference image: within bounds, rounded
		{14, 14, 3136, 12544, 56, 56},       // too small: scaled up
		{1000, 1000, 3136, 12544, 112, 112}, // too large: scaled down
		{42, 70, 3136, 1 << 30, 56, 56},     // 42/28 = 1.5 and 70/28 = 2.5 round half to even, then grow
	} {
		h, w, err := SmartResize(tc.h, tc.w, 28, tc.minP, tc.maxP)
		if err != nil || h != tc.wantH || w != tc.wantW {
			t.Errorf("SmartResize(%d, %d) = %d, %d, %v; want %d, %d", tc.h, tc.w, h, w, err, tc.wantH, tc.wantW)
		}
	}
	if _, _, err := SmartResize(1, 300, 28, 3136, 12544); err == nil {
		t.Error("aspect ratio 300 accepted")
	}
}
