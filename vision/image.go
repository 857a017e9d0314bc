// Package vision turns images into what vision-language models read: it
// decodes image bytes (PNG, JPEG, WebP, GIF's first frame) under limits on
// bytes and pixels, and preprocesses them exactly as the models' Hugging
// Face image processors do (preprocessor_config.json): Pillow's resampling,
// rescale and normalisation, and the patch layouts of Qwen2-VL and Gemma 3.
package vision

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // image.Decode reads a GIF's first frame
	_ "image/jpeg"
	_ "image/png"
	"os"
	"strings"

	_ "golang.org/x/image/webp"
)

// Limits bound what one image may cost before it is decoded.
type Limits struct {
	MaxBytes  int // encoded size
	MaxPixels int // width × height, checked from the header before decoding
}

// DefaultLimits allow a 20 MB file of up to 50 megapixels, about what
// OpenAI's API accepts; the models downscale far below that anyway.
var DefaultLimits = Limits{MaxBytes: 20 << 20, MaxPixels: 50_000_000}

// InputError is an image the client sent that cannot be used: the request
// is at fault (HTTP 400), and the message says why.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func inputErrorf(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// IsInputError reports whether err is the client's fault.
func IsInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// Image is a decoded image and the hash of its pixels, which keys it in
// the prefix cache: two requests share cached image tokens only when
// their images are the same.
type Image struct {
	RGB
	Hash [32]byte
}

// Decode decodes an encoded image under the limits, converting it to RGB
// as the processors' convert_rgb does (transparency composited over white).
func Decode(data []byte, lim Limits) (*Image, error) {
	if lim.MaxBytes > 0 && len(data) > lim.MaxBytes {
		return nil, inputErrorf("image is %d bytes, over the limit of %d bytes", len(data), lim.MaxBytes)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, inputErrorf("cannot decode image (PNG, JPEG, WebP and GIF are supported): %v", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, inputErrorf("%s image has no pixels (%d×%d)", format, cfg.Width, cfg.Height)
	}
	if lim.MaxPixels > 0 && int64(cfg.Width)*int64(cfg.Height) > int64(lim.MaxPixels) {
		return nil, inputErrorf("image is %d×%d = %d pixels, over the limit of %d pixels", cfg.Width, cfg.Height, int64(cfg.Width)*int64(cfg.Height), lim.MaxPixels)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, inputErrorf("cannot decode %s image: %v", format, err)
	}
	out := &Image{RGB: toRGB(img)}
	out.Hash = sha256.Sum256(out.Pix)
	return out, nil
}

// toRGB flattens any image to 8-bit RGB, compositing over white.
func toRGB(img image.Image) RGB {
	b := img.Bounds()
	out := RGB{W: b.Dx(), H: b.Dy(), Pix: make([]uint8, b.Dx()*b.Dy()*3)}
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			switch c := img.At(x, y).(type) {
			case color.RGBA:
				if c.A == 255 {
					out.Pix[i], out.Pix[i+1], out.Pix[i+2] = c.R, c.G, c.B
					i += 3
					continue
				}
			case color.NRGBA:
				if c.A == 255 {
					out.Pix[i], out.Pix[i+1], out.Pix[i+2] = c.R, c.G, c.B
					i += 3
					continue
				}
			case color.Gray:
				out.Pix[i], out.Pix[i+1], out.Pix[i+2] = c.Y, c.Y, c.Y
				i += 3
				continue
			}
			r, g, bl, a := img.At(x, y).RGBA() // 16-bit, premultiplied
			white := 0xffff - a
			for k, v := range [3]uint32{r, g, bl} {
				out.Pix[i+k] = uint8((v + white + 0x80) / 0x101)
			}
			i += 3
		}
	}
	return out
}

// ReadFile reads and decodes an image file under the limits, refusing a
// file over lim.MaxBytes before reading it.
func ReadFile(path string, lim Limits) (*Image, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read image file: %w", err)
	}
	if lim.MaxBytes > 0 && info.Size() > int64(lim.MaxBytes) {
		return nil, inputErrorf("image file is %d bytes, over the limit of %d bytes", info.Size(), lim.MaxBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read image file: %w", err)
	}
	return Decode(data, lim)
}

// DecodeDataURL decodes a data: URL (data:image/png;base64,...).
func DecodeDataURL(url string, lim Limits) (*Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return nil, inputErrorf("image URL must be a data: URL (data:image/png;base64,...)")
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, inputErrorf("data: URL has no comma before its payload")
	}
	if !strings.HasSuffix(meta, ";base64") {
		return nil, inputErrorf("data: URL must be base64 encoded (%q)", meta)
	}
	// Base64 is 4/3 of the bytes: refuse an oversized payload before decoding it.
	if lim.MaxBytes > 0 && base64.StdEncoding.DecodedLen(len(payload)) > lim.MaxBytes+3 {
		return nil, inputErrorf("image is about %d bytes, over the limit of %d bytes", base64.StdEncoding.DecodedLen(len(payload)), lim.MaxBytes)
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, inputErrorf("data: URL payload is not valid base64: %v", err)
	}
	return Decode(data, lim)
}
