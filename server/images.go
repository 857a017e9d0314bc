package server

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
		img, err = vision.ReadFile(strings.TrimPrefix(src, "file://"), lim)
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

// imageData reads /generate's image_data and video_data for prompt i. Per
// prompt, image_data is an image (a string) or a list of them, and
// video_data a video (a list of its frames, each an image) or a list of
// videos; a batch has a list of those, one per prompt.
func (s *Server) imageData(images, videos json.RawMessage, i int, batch bool) ([]engine.Image, *apiError) {
	var items []mediaItem
	if raw, param, err := perPrompt(images, "image_data", i, batch); err != nil {
		return nil, err
	} else if raw != nil {
		srcs, ok := oneOrList[string](raw)
		if !ok {
			return nil, wrongType(param, "an image (data: URL or base64) or a list of them", rawKind(raw))
		}
		for j, src := range srcs {
			items = append(items, mediaItem{srcs: []string{src}, params: []string{element(param, j, len(srcs))}})
		}
	}
	if raw, param, err := perPrompt(videos, "video_data", i, batch); err != nil {
		return nil, err
	} else if raw != nil {
		if !s.eng.ReadsVideo() {
			return nil, badRequest(param, codeUnsupported, "model %s reads no video", s.eng.ModelConfig().Architecture)
		}
		list, ok := oneOrList[[]string](raw)
		if !ok {
			return nil, wrongType(param, "a video as a list of its frames (each an image: data: URL or base64), or a list of videos; video files are not decoded", rawKind(raw))
		}
		for j, frames := range list {
			at := element(param, j, len(list))
			if len(frames) == 0 {
				return nil, badRequest(at, codeInvalidValue, "%s has no frames", at)
			}
			item := mediaItem{srcs: frames, video: true}
			for f := range frames {
				item.params = append(item.params, fmt.Sprintf("%s[%d]", at, f))
			}
			items = append(items, item)
		}
	}
	if items == nil {
		return nil, nil
	}
	field := "image_data"
	if items[len(items)-1].video {
		field = "video_data" // the frames are what pass the limit
	}
	return s.decodeMedia(items, indexed(field, i, batch))
}

// oneOrList decodes raw as one T or as a list of them.
func oneOrList[T any](raw json.RawMessage) ([]T, bool) {
	if one, ok := decodeAs[T](raw); ok {
		return []T{one}, true
	}
	return decodeAs[[]T](raw)
}

// element names item j of the n that param holds (param itself for one).
func element(param string, j, n int) string {
	if n == 1 {
		return param
	}
	return fmt.Sprintf("%s[%d]", param, j)
}

// perPrompt picks prompt i's entry of a per-prompt field (the field
// itself for a single prompt); nil when absent.
func perPrompt(raw json.RawMessage, name string, i int, batch bool) (json.RawMessage, string, *apiError) {
	if isNull(raw) {
		return nil, name, nil
	}
	if !batch {
		return raw, name, nil
	}
	list, ok := decodeAs[[]json.RawMessage](raw)
	if !ok || i >= len(list) {
		return nil, name, badRequest(name, codeInvalidValue, "%s of a batch must be a list with one entry per prompt", name)
	}
	if isNull(list[i]) {
		return nil, name, nil
	}
	return list[i], fmt.Sprintf("%s[%d]", name, i), nil
}

// imageParts collects a chat request's image_url and video parts in
// order.
type imageParts struct {
	placeholder string // the model's image text; "" when it takes none
	video       string // the model's video text; "" when it reads no video
	model       string
	items       []mediaItem
}

// mediaItem is one image (one source) or one video (its frames' sources).
type mediaItem struct {
	srcs   []string
	params []string
	video  bool
}

// count is what the item counts for against --max-images.
func (m mediaItem) count() int { return len(m.srcs) }

// addVideo reads one video part: {"type": "video", "video": [frame, ...]}
// (Qwen2-VL's format), each frame an image as image_url takes; it returns
// the text that stands for the video in the message.
func (p *imageParts) addVideo(part map[string]json.RawMessage, at string) (string, *apiError) {
	if p.video == "" {
		return "", badRequest(at+".type", codeUnsupported, "model %s reads no video (or has no tokenizer to place it)", p.model)
	}
	frames, ok := decodeAs[[]string](part["video"])
	if !ok || len(frames) == 0 {
		return "", badRequest(at+".video", codeInvalidValue, "%s.video must be a non-empty list of the video's frames, each an image (data: URL or base64): video files are not decoded", at)
	}
	item := mediaItem{srcs: frames, video: true}
	for i := range frames {
		item.params = append(item.params, fmt.Sprintf("%s.video[%d]", at, i))
	}
	p.items = append(p.items, item)
	return p.video, nil
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
	p.items = append(p.items, mediaItem{srcs: []string{*iu.URL}, params: []string{at + ".image_url.url"}})
	return p.placeholder, nil
}

// chatImages decodes the collected images and videos.
func (s *Server) chatImages(p *imageParts) ([]engine.Image, *apiError) {
	return s.decodeMedia(p.items, "messages")
}

// decodeMedia decodes images and videos' frames, after checking their
// count against --max-images (a video's frames each count).
func (s *Server) decodeMedia(items []mediaItem, param string) ([]engine.Image, *apiError) {
	count := 0
	for _, it := range items {
		count += it.count()
	}
	if err := s.tooManyImages(count, param); err != nil {
		return nil, err
	}
	out := make([]engine.Image, 0, len(items))
	for _, it := range items {
		imgs := make([]*vision.Image, len(it.srcs))
		for i, src := range it.srcs {
			img, err := s.loadImage(src, it.params[i])
			if err != nil {
				return nil, err
			}
			imgs[i] = img
		}
		if it.video {
			out = append(out, engine.Image{Frames: imgs})
		} else {
			out = append(out, engine.Image{Decoded: imgs[0]})
		}
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
