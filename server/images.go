package server

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gosling-ai/gosling/engine"
	"github.com/gosling-ai/gosling/vision"
)

// Images arrive as data: URLs (OpenAI image_url, SGLang image_data), as
// bare base64 (SGLang image_data), or, only when Options.AllowLocalImages
// is set, as paths of files on the server. Remote URLs are never fetched:
// a server that fetches whatever URL a client names is an SSRF hole.

// loadImage decodes one image source; param names it in errors.
func (s *Server) loadImage(src, param string) (*vision.Image, *apiError) {
	if !s.eng.SupportsImages() {
		return nil, badRequest(param, codeUnsupported, "model %s does not accept images", s.eng.ModelConfig().Architecture)
	}
	lim := s.imageLimits()
	var img *vision.Image
	var err error
	switch {
	case strings.HasPrefix(src, "data:"):
		img, err = vision.DecodeDataURL(src, lim)
	case strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://"):
		return nil, badRequest(param, codeUnsupported, "%s: remote image URLs are not fetched; send the image as a data: URL (data:image/png;base64,...)", param)
	case s.opts.AllowLocalImages && looksLikePath(src):
		img, err = s.readImageFile(src, lim)
	default:
		data, derr := base64.StdEncoding.DecodeString(src)
		if derr != nil {
			hint := ""
			if looksLikePath(src) {
				hint = " (local image files are read only with --allow-local-images)"
			}
			return nil, badRequest(param, codeInvalidValue, "%s must be a data: URL or base64-encoded image%s", param, hint)
		}
		img, err = vision.Decode(data, lim)
	}
	if err != nil { // every failure here is the image the client sent
		return nil, badRequest(param, codeInvalidValue, "%s: %v", param, err)
	}
	return img, nil
}

func looksLikePath(src string) bool {
	return strings.HasPrefix(src, "/") || strings.HasPrefix(src, "./") || strings.HasPrefix(src, "file://")
}

func (s *Server) readImageFile(src string, lim vision.Limits) (*vision.Image, error) {
	path := strings.TrimPrefix(src, "file://")
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read image file: %w", err)
	}
	if lim.MaxBytes > 0 && info.Size() > int64(lim.MaxBytes) {
		return nil, fmt.Errorf("image file is %d bytes, over the limit of %d bytes", info.Size(), lim.MaxBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read image file: %w", err)
	}
	return vision.Decode(data, lim)
}

func (s *Server) imageLimits() vision.Limits {
	lim := vision.DefaultLimits
	if s.opts.MaxImageBytes > 0 {
		lim.MaxBytes = s.opts.MaxImageBytes
	}
	if s.opts.MaxImagePixels > 0 {
		lim.MaxPixels = s.opts.MaxImagePixels
	}
	return lim
}

// imageData reads /generate's image_data for prompt i: a string or a
// list of strings per prompt (a list of those for a batch).
func (s *Server) imageData(raw json.RawMessage, i int, batch bool) ([]engine.Image, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	param := "image_data"
	if batch {
		list, ok := decodeAs[[]json.RawMessage](raw)
		if !ok || i >= len(list) {
			return nil, badRequest(param, codeInvalidValue, "image_data of a batch must be a list with one entry per prompt")
		}
		raw, param = list[i], fmt.Sprintf("image_data[%d]", i)
		if isNull(raw) {
			return nil, nil
		}
	}
	var srcs []string
	if one, ok := decodeAs[string](raw); ok {
		srcs = []string{one}
	} else if list, ok := decodeAs[[]string](raw); ok {
		srcs = list
	} else {
		return nil, wrongType(param, "an image (data: URL or base64) or a list of them", rawKind(raw))
	}
	if err := s.tooManyImages(len(srcs), param); err != nil {
		return nil, err
	}
	out := make([]engine.Image, len(srcs))
	for j, src := range srcs {
		at := param
		if len(srcs) > 1 {
			at = fmt.Sprintf("%s[%d]", param, j)
		}
		img, err := s.loadImage(src, at)
		if err != nil {
			return nil, err
		}
		out[j] = engine.Image{Decoded: img}
	}
	return out, nil
}

// imageParts collects a chat request's image_url parts in order.
type imageParts struct {
	placeholder string // the model's image text; "" when it takes none
	model       string
	urls        []string
	params      []string
}

// add reads one image_url part ({"url": ..., "detail": "auto"}) and
// returns the text that stands for it in the message.
func (p *imageParts) add(part map[string]json.RawMessage, at string) (string, *apiError) {
	if p.placeholder == "" {
		return "", badRequest(at+".type", codeUnsupported, "model %s does not accept images (or has no tokenizer to place them)", p.model)
	}
	var iu struct {
		URL    *string `json:"url"`
		Detail string  `json:"detail"`
	}
	if err := json.Unmarshal(part["image_url"], &iu); err != nil || iu.URL == nil {
		return "", badRequest(at+".image_url", codeMissing, "%s.image_url must be an object with a url", at)
	}
	// The models see every image at the resolution their processor picks;
	// a detail level other than auto would be accepted and ignored.
	if iu.Detail != "" && iu.Detail != "auto" {
		return "", badRequest(at+".image_url.detail", codeUnsupported, "%s.image_url.detail %q is not supported (only \"auto\")", at, iu.Detail)
	}
	p.urls = append(p.urls, *iu.URL)
	p.params = append(p.params, at+".image_url.url")
	return p.placeholder, nil
}

// chatImages decodes the collected images.
func (s *Server) chatImages(p *imageParts) ([]engine.Image, *apiError) {
	if err := s.tooManyImages(len(p.urls), "messages"); err != nil {
		return nil, err
	}
	var out []engine.Image
	for i, url := range p.urls {
		img, err := s.loadImage(url, p.params[i])
		if err != nil {
			return nil, err
		}
		out = append(out, engine.Image{Decoded: img})
	}
	return out, nil
}

// imageOptions reads a request's mm_processor_kwargs (vLLM's name): the
// image processor settings for this request's images. A key the model's
// processor does not read, a bad value, or a pixel budget past the
// server's --max-image-pixels is a 400 naming it.
func (s *Server) imageOptions(raw json.RawMessage) (vision.Options, *apiError) {
	const param = "mm_processor_kwargs"
	if isNull(raw) {
		return vision.Options{}, nil
	}
	opts, err := vision.ParseOptions(raw)
	if err == nil {
		err = s.eng.CheckImageOptions(opts)
	}
	if err != nil {
		return opts, optionError(param, err)
	}
	if opts.MaxPixels != nil || opts.MinPixels != nil {
		proc, _ := s.eng.ImageProcessor().With(opts)
		if lim := s.imageLimits().MaxPixels; lim > 0 && proc.MaxPixelsPerImage() > lim {
			key := "max_pixels"
			if opts.MaxPixels == nil {
				key = "min_pixels"
			}
			return opts, badRequest(param+"."+key, codeInvalidValue, "%s.%s would let an image be resized to %d pixels, over the server's limit of %d pixels per image (--max-image-pixels)",
				param, key, proc.MaxPixelsPerImage(), lim)
		}
	}
	return opts, nil
}

// optionError is a 400 for an image processor option, naming its key.
func optionError(param string, err error) *apiError {
	var oe *vision.OptionError
	if errors.As(err, &oe) {
		if oe.Key != "" {
			param += "." + oe.Key
		}
		return badRequest(param, codeInvalidValue, "%s: %s", param, oe.Msg)
	}
	return badRequest(param, codeInvalidValue, "%s: %v", param, err)
}

// prepareImages preprocesses a request's decoded images under its options
// once, before its text is tokenized: pan-and-scan crops change the text,
// and the image tokens count against the context.
func (s *Server) prepareImages(imgs []engine.Image, opts vision.Options, param string) ([]engine.Image, *apiError) {
	out, err := s.eng.PrepareImages(imgs, opts)
	if err != nil {
		var oe *vision.OptionError
		if errors.As(err, &oe) {
			return nil, optionError("mm_processor_kwargs", err)
		}
		return nil, badRequest(param, codeInvalidValue, "%s: %v", param, err)
	}
	return out, nil
}

// tooManyImages refuses a request with more images than the engine takes,
// before any is decoded.
func (s *Server) tooManyImages(count int, param string) *apiError {
	if limit := s.eng.MaxImages(); s.eng.SupportsImages() && count > limit {
		return badRequest(param, codeInvalidValue, "the request has %d images; at most %d are allowed per request (--max-images)", count, limit)
	}
	return nil
}
