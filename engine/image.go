package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
	"github.com/gosling-ai/gosling/vision"
)

// Image is one image of a request, in the order of the prompt's image
// placeholders: decoded (the engine preprocesses it with the model's image
// processor) or already preprocessed.
//
// A video (Qwen2.5-VL) is an Image with Frames: its frames in order, of one
// size. Images and videos take the prompt's image and video placeholders
// each in their own order.
type Image struct {
	Decoded *vision.Image
	Pixels  *vision.Pixels
	Frames  []*vision.Image
	// views are what the model reads of the image (the whole image, then
	// any pan-and-scan crops), each with its prefix-cache key; set by
	// PrepareImages, or by Generate for an image not prepared.
	views []vision.Pixels
	keys  []int
}

// count is how many images img counts for against MaxImages: a video's
// frames each count.
func (img Image) count() int { return max(len(img.Frames), 1) }

// Views is how many images the model reads for this one: 1, plus any
// pan-and-scan crops; 0 before PrepareImages.
func (img Image) Views() int { return len(img.views) }

// DefaultMaxImages is how many images one request may carry unless
// Config.MaxImages says otherwise.
const DefaultMaxImages = 16

// imageLayout is a request's images and where they sit in its prompt.
type imageLayout struct {
	images     []reqImage
	promptKeys []int    // the prompt as the prefix cache keys it (newRequest hands it to sched.Req.Keys); nil without images
	mrope      []int32  // M-RoPE streams of the prompt tokens [3*len(prompt)]; nil: 1-D positions
	ropeDelta  int      // position − sequence index of tokens after the prompt
	spans      [][2]int // bidirectional token ranges (newRequest hands them to sched.Req.Spans)
}

// imageTokens is how many prompt tokens the images take.
func (l *imageLayout) imageTokens() int {
	n := 0
	for _, img := range l.images {
		n += img.span.Len
	}
	return n
}

// reqImage is an image view (or a video) as the scheduler uses it.
type reqImage struct {
	video  bool
	px     *vision.Pixels
	span   model.ImageSpan
	key    int       // the prefix-cache key of its placeholder tokens
	embeds []float32 // the vision tower's output, [span.Len, hidden]; nil until first needed
}

// vision is the engine's image side, nil for text-only models.
type visionState struct {
	model model.VisionRunnable
	proc  *vision.Processor // nil: only preprocessed pixels are accepted
	// video reads videos (Qwen2.5-VL): video_preprocessor_config.json,
	// else the image processor's settings, as transformers falls back to
	// preprocessor_config.json; nil: the model reads no video.
	video *vision.Processor
	cfg   *model.VisionConfig
}

// initVision loads the image processor of a vision-language model, with
// Config.ImageOptions applied.
func (e *Engine) initVision() error {
	vm, ok := e.model.(model.VisionRunnable)
	if !ok {
		if !e.cfg.ImageOptions.IsZero() {
			return fmt.Errorf("image processor options were given, but model %s reads no images", e.model.Config().Architecture)
		}
		return nil
	}
	e.vision = &visionState{model: vm, cfg: e.model.Config().Vision}
	proc, err := imageProcessor(e.cfg, e.checkpoint.Path, e.model.Config())
	if err != nil {
		return err
	}
	if proc == nil {
		e.log.Warn("no preprocessor_config.json: images must come preprocessed", "path", e.checkpoint.Path)
		return nil
	}
	if e.cfg.LoadFormat == "dummy" {
		e.log.Info("dummy weights: images preprocessed as by the published checkpoints' processor", "type", proc.Type())
	}
	e.vision.proc = proc
	if e.vision.cfg.VideoTokenID < 0 {
		return nil
	}
	e.vision.video = proc
	path := filepath.Join(e.checkpoint.Path, "video_preprocessor_config.json")
	if _, err := os.Stat(path); err == nil {
		video, err := vision.LoadProcessor(path)
		if err != nil {
			return fmt.Errorf("load video processor: %w", err)
		}
		if e.vision.video, err = video.With(e.cfg.ImageOptions); err != nil {
			return fmt.Errorf("image processor options (video): %w", err)
		}
	}
	return nil
}

// imageProcessor is the image processor of the vision-language model in
// dir, with cfg.ImageOptions applied: its preprocessor_config.json, or
// for dummy weights without one the published checkpoints' processor
// (dummy weights stand for such a checkpoint, so images cost what they
// would there); nil when there is neither.
func imageProcessor(cfg Config, dir string, mc *model.Config) (*vision.Processor, error) {
	path := filepath.Join(dir, "preprocessor_config.json")
	var proc *vision.Processor
	var err error
	if _, serr := os.Stat(path); serr == nil {
		if proc, err = vision.LoadProcessor(path); err != nil {
			return nil, fmt.Errorf("load image processor: %w", err)
		}
	} else if arch, _ := modelregistry.Lookup(mc.Architecture); cfg.LoadFormat == "dummy" && arch.Processor != nil {
		if proc, err = vision.NewProcessor(arch.Processor(mc)); err != nil {
			return nil, fmt.Errorf("the published checkpoints' image processor: %w", err)
		}
	} else {
		if !cfg.ImageOptions.IsZero() {
			return nil, fmt.Errorf("image processor options were given, but the model has no preprocessor_config.json")
		}
		return nil, nil
	}
	if proc, err = proc.With(cfg.ImageOptions); err != nil {
		return nil, fmt.Errorf("image processor options: %w", err)
	}
	return proc, nil
}

// ImagePromptTokens is how many views (an image and its pan-and-scan
// crops) and prompt tokens imgs take with the model cfg names, found
// from its config and image processor alone, without loading weights:
// what a caller sizing the context before New needs. An error says why
// the model cannot read the images (a text-only model, no image
// processor).
func ImagePromptTokens(cfg Config, imgs []Image) (views, tokens int, err error) {
	ck, err := openCheckpoint(cfg)
	if err != nil {
		return 0, 0, err
	}
	defer ck.Close()
	mc := &ck.Config
	if mc.Vision == nil {
		return 0, 0, fmt.Errorf("model %s reads no images: it has no vision tower", mc.Architecture)
	}
	dir := ck.Path
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	proc, err := imageProcessor(cfg, dir, mc)
	if err != nil {
		return 0, 0, err
	}
	for i, img := range imgs {
		switch {
		case img.Pixels != nil:
			views++
			tokens += mc.Vision.ImageTokens(img.Pixels.Grid)
		case img.Decoded != nil && proc != nil:
			n, grid, err := proc.Plan(img.Decoded.W, img.Decoded.H, 1)
			if err != nil {
				return 0, 0, fmt.Errorf("image %d: %w", i+1, err)
			}
			views += n
			tokens += n * mc.Vision.ImageTokens(grid)
		case img.Decoded != nil:
			return 0, 0, fmt.Errorf("model %s has no preprocessor_config.json: its images cannot be preprocessed", mc.Architecture)
		default:
			return 0, 0, fmt.Errorf("image %d: only images, decoded or preprocessed, are counted here", i+1)
		}
	}
	return views, tokens, nil
}

// SupportsImages reports whether the model reads images.
func (e *Engine) SupportsImages() bool { return e.vision != nil }

// PrepareImages preprocesses a request's images once, with the model's
// image processor under opts (over Config.ImageOptions), so that a caller
// can place their text (ExpandImageText) and count their tokens
// (ExpandImageTokens) before Generate, which takes prepared images as they
// are. Every error is the request's.
func (e *Engine) PrepareImages(imgs []Image, opts vision.Options) ([]Image, error) {
	if len(imgs) == 0 {
		return nil, nil
	}
	if e.vision == nil {
		return nil, fmt.Errorf("model %s does not accept images", e.model.Config().Architecture)
	}
	count := 0
	for _, img := range imgs {
		count += img.count()
	}
	if limit := e.maxImages(); count > limit {
		return nil, fmt.Errorf("the request has %d images (a video's frames each count); at most %d are allowed per request", count, limit)
	}
	proc, video := e.vision.proc, e.vision.video
	if proc != nil {
		var err error
		if proc, err = proc.With(opts); err != nil {
			return nil, err
		}
		if video != nil {
			if video, err = video.With(opts); err != nil {
				return nil, err
			}
		}
	} else if !opts.IsZero() {
		return nil, fmt.Errorf("the model has no preprocessor_config.json, so image processor options do not apply")
	}
	// What the images will cost in tokens, known before any is
	// preprocessed: a request whose images cannot fit the context is
	// refused before their pixels (pan-and-scan crops, upscaled images)
	// are made.
	tokens := 0
	for i, img := range imgs {
		p, first, frames := proc, img.Decoded, 1
		if img.Frames != nil {
			if video == nil {
				return nil, fmt.Errorf("model %s reads no video", e.model.Config().Architecture)
			}
			p, first, frames = video, img.Frames[0], len(img.Frames)
		}
		if img.views != nil || first == nil || p == nil {
			continue
		}
		views, grid, err := p.Plan(first.W, first.H, frames)
		if err != nil {
			return nil, fmt.Errorf("image %d: %w", i+1, err)
		}
		tokens += views * e.vision.model.ImageTokens(&vision.Pixels{Grid: grid})
	}
	if tokens > e.cfg.ContextLength {
		return nil, fmt.Errorf("the request's images take %d tokens (pan-and-scan crops and video frames included), past the context length of %d", tokens, e.cfg.ContextLength)
	}
	out := slices.Clone(imgs)
	for i := range out {
		img := &out[i]
		switch {
		case img.views != nil:
		case img.Frames != nil:
			if video == nil {
				return nil, fmt.Errorf("model %s reads no video", e.model.Config().Architecture)
			}
			frames := make([]vision.RGB, len(img.Frames))
			h := sha256.New()
			fp := video.Fingerprint()
			h.Write(fp[:])
			for f, frame := range img.Frames {
				frames[f] = frame.RGB
				h.Write(frame.Hash[:])
			}
			px, err := video.PreprocessVideo(frames)
			if err != nil {
				return nil, fmt.Errorf("video: %w", err)
			}
			img.views, img.keys = []vision.Pixels{px}, []int{imageKey(h.Sum(nil))}
		case img.Pixels != nil:
			h := sha256.New()
			binary.Write(h, binary.LittleEndian, img.Pixels.Data)
			img.views, img.keys = []vision.Pixels{*img.Pixels}, []int{imageKey(h.Sum(nil))}
		case img.Decoded != nil:
			if proc == nil {
				return nil, fmt.Errorf("model has no preprocessor_config.json: images cannot be preprocessed")
			}
			views, err := proc.Preprocess(img.Decoded.RGB)
			if err != nil {
				return nil, fmt.Errorf("image %d: %w", i+1, err)
			}
			// The same image preprocessed under other settings is other
			// input: the key covers the settings and the view.
			fp := proc.Fingerprint()
			img.views, img.keys = views, make([]int, len(views))
			for v := range views {
				h := sha256.New()
				h.Write(img.Decoded.Hash[:])
				h.Write(fp[:])
				binary.Write(h, binary.LittleEndian, int64(v))
				img.keys[v] = imageKey(h.Sum(nil))
			}
		default:
			return nil, fmt.Errorf("image %d is empty", i+1)
		}
	}
	return out, nil
}

// imageKey is an image view's prefix-cache key: negative keys never
// collide with token ids, and tokens of different views get different
// keys, so they never share a cached prefix.
func imageKey(hash []byte) int {
	return -1 - int(binary.LittleEndian.Uint32(hash)&math.MaxInt32)
}

// ExpandImageTokens expands each image view's placeholder in ids to the
// view's length: a run of image_token_id of one token (a prompt whose
// template wrote one placeholder) or of exactly the view's length, one run
// per view in order. imgs must be prepared.
func (e *Engine) ExpandImageTokens(ids []int, imgs []Image) ([]int, error) {
	_, out, err := e.expandImageTokens(ids, imgs)
	return out, err
}

// expandImageTokens is ExpandImageTokens that also lays out the views.
func (e *Engine) expandImageTokens(ids []int, imgs []Image) ([]reqImage, []int, error) {
	if len(imgs) > 0 && e.vision == nil {
		return nil, nil, fmt.Errorf("model %s does not accept images", e.model.Config().Architecture)
	}
	// Images and videos, each kind in its placeholders' order.
	var queues [2][]reqImage
	numImages, numVideos := 0, 0
	for _, img := range imgs {
		video := img.Frames != nil
		if video {
			numVideos++
		} else {
			numImages++
		}
		for v := range img.views {
			k := 0
			if video {
				k = 1
			}
			queues[k] = append(queues[k], reqImage{video: video, px: &img.views[v], key: img.keys[v]})
		}
	}
	if len(queues[0])+len(queues[1]) == 0 {
		return nil, ids, nil
	}
	vc := e.vision.cfg
	tokens := [2]int{vc.ImageTokenID, vc.VideoTokenID}
	var runs [2]int
	for i, id := range ids {
		for k, tok := range tokens {
			if id == tok && tok >= 0 && (i == 0 || ids[i-1] != tok) {
				runs[k]++
			}
		}
	}
	if runs[0] != len(queues[0]) {
		if len(queues[0]) != numImages {
			return nil, nil, fmt.Errorf("the prompt has %d image placeholders for %d images, which make %d views with their pan-and-scan crops (one placeholder each)", runs[0], numImages, len(queues[0]))
		}
		return nil, nil, fmt.Errorf("the prompt has %d image placeholders for %d images", runs[0], numImages)
	}
	if runs[1] != len(queues[1]) {
		return nil, nil, fmt.Errorf("the prompt has %d video placeholders for %d videos", runs[1], numVideos)
	}
	what := func(k, n int) string {
		switch {
		case k == 1:
			return fmt.Sprintf("video %d", n+1)
		case len(queues[0]) == numImages:
			return fmt.Sprintf("image %d", n+1)
		}
		return fmt.Sprintf("image view %d (images and their pan-and-scan crops)", n+1)
	}
	var views []reqImage
	out := make([]int, 0, len(ids))
	var next [2]int
	for i := 0; i < len(ids); {
		k := slices.Index(tokens[:], ids[i])
		if k < 0 || tokens[k] < 0 {
			out = append(out, ids[i])
			i++
			continue
		}
		j := i
		for j < len(ids) && ids[j] == tokens[k] {
			j++
		}
		view := queues[k][next[k]]
		n := e.vision.model.ImageTokens(view.px)
		if j-i != n && j-i != 1 {
			return nil, nil, fmt.Errorf("%s has %d placeholder tokens in the prompt; it needs %d (or a single one to expand)", what(k, next[k]), j-i, n)
		}
		view.span = model.ImageSpan{Start: len(out), Len: n, Grid: view.px.Grid}
		if view.video {
			view.span.SecondsPerGrid = e.vision.video.SecondsPerGrid()
		}
		for range n {
			out = append(out, tokens[k])
		}
		views = append(views, view)
		next[k]++
		i = j
	}
	return views, out, nil
}

// prepareImages preprocesses a request's images not yet prepared, expands
// their placeholders in ids, and lays the images out. It runs on the
// caller's goroutine: the scheduler only encodes.
func (e *Engine) prepareImages(imgs []Image, ids []int) (*imageLayout, []int, error) {
	r := &imageLayout{}
	if len(imgs) == 0 {
		return r, ids, nil
	}
	imgs, err := e.PrepareImages(imgs, vision.Options{})
	if err != nil {
		return nil, nil, err
	}
	views, out, err := e.expandImageTokens(ids, imgs)
	if err != nil {
		return nil, nil, err
	}
	r.images = views
	spans := make([]model.ImageSpan, len(views))
	for i := range views {
		spans[i] = views[i].span
	}
	r.mrope, r.ropeDelta, r.spans = e.vision.model.Layout(out, spans)
	r.promptKeys = append([]int(nil), out...)
	for _, img := range views {
		for t := img.span.Start; t < img.span.Start+img.span.Len; t++ {
			r.promptKeys[t] = img.key
		}
	}
	return r, out, nil
}

// ExpandImageText puts the model's image placeholder text into a text
// prompt as the Hugging Face processors do, so that the tokenizer sees it.
// Qwen2-VL: each <|image_pad|> stays one token here and is expanded by
// ExpandImageTokens. Gemma 3: the k-th <start_of_image> becomes
// "\n\n<start_of_image><image_soft_token><end_of_image>\n\n" and, when
// image k has pan-and-scan crops, Gemma3Processor's "Here is the original
// image … and here are some crops to help you see better …" with one such
// sequence per crop. imgs are the prepared images (nil: no crops).
func (e *Engine) ExpandImageText(prompt string, imgs []Image) string {
	if e.vision == nil || e.tok == nil || e.vision.cfg.MMTokensPerImage == 0 || e.vision.cfg.StartTokenID < 0 {
		return prompt
	}
	boi, img, eoi := e.tok.TokenString(e.vision.cfg.StartTokenID), e.tok.TokenString(e.vision.cfg.ImageTokenID), e.tok.TokenString(e.vision.cfg.EndTokenID)
	if boi == "" || img == "" || strings.Contains(prompt, img) {
		return prompt
	}
	full := "\n\n" + boi + img + eoi + "\n\n"
	parts := strings.Split(prompt, boi)
	var b strings.Builder
	b.WriteString(parts[0])
	for k, rest := range parts[1:] {
		crops := 0
		if k < len(imgs) {
			crops = max(imgs[k].Views()-1, 0)
		}
		if crops == 0 {
			b.WriteString(full)
		} else {
			b.WriteString("Here is the original image " + full + " and here are some crops to help you see better ")
			b.WriteString(strings.Repeat(" "+full, crops)[1:])
		}
		b.WriteString(rest)
	}
	return b.String()
}

// ImagePlaceholderText is what a chat message holds where an image goes,
// as the models' chat templates write it: Qwen2-VL's
// <|vision_start|><|image_pad|><|vision_end|>, Gemma 3's <start_of_image>
// (which ExpandImageText completes). "" for text-only models or models
// without a tokenizer.
func (e *Engine) ImagePlaceholderText() string {
	return e.placeholderText(false)
}

// ReadsVideo reports whether the model reads videos (given as frames).
func (e *Engine) ReadsVideo() bool { return e.vision != nil && e.vision.video != nil }

// VideoPlaceholderText is what a chat message holds where a video goes:
// Qwen2-VL's <|vision_start|><|video_pad|><|vision_end|>; "" for models
// that read no video or have no tokenizer.
func (e *Engine) VideoPlaceholderText() string {
	if e.vision == nil || e.vision.video == nil {
		return ""
	}
	return e.placeholderText(true)
}

func (e *Engine) placeholderText(video bool) string {
	if e.vision == nil || e.tok == nil {
		return ""
	}
	vc := e.vision.cfg
	if vc.MMTokensPerImage > 0 {
		return e.tok.TokenString(vc.StartTokenID)
	}
	pad := vc.ImageTokenID
	if video {
		pad = vc.VideoTokenID
	}
	return e.tok.TokenString(vc.StartTokenID) + e.tok.TokenString(pad) + e.tok.TokenString(vc.EndTokenID)
}

// MaxImages is the most images one request may carry.
func (e *Engine) MaxImages() int { return e.maxImages() }

// CheckImageOptions checks a request's image processor options against
// the model's processor without preprocessing anything.
func (e *Engine) CheckImageOptions(opts vision.Options) error {
	if opts.IsZero() {
		return nil
	}
	if e.vision == nil {
		return fmt.Errorf("model %s does not accept images", e.model.Config().Architecture)
	}
	if e.vision.proc == nil {
		return fmt.Errorf("the model has no preprocessor_config.json, so image processor options do not apply")
	}
	_, err := e.vision.proc.With(opts)
	return err
}

// ImageProcessor is the model's image processor with Config.ImageOptions
// applied; nil for text-only models and models without a
// preprocessor_config.json.
func (e *Engine) ImageProcessor() *vision.Processor {
	if e.vision == nil {
		return nil
	}
	return e.vision.proc
}

func (e *Engine) maxImages() int {
	if e.cfg.MaxImages > 0 {
		return e.cfg.MaxImages
	}
	return DefaultMaxImages
}

// encodeImages runs the vision tower through the runner
// (runner.Runner.EncodeImage) over the images of requests about to
// prefill, each image whole and once per request (a chunked prefill
// takes rows of the stored output). A request whose image fails to
// encode finishes with the error; the others go on.
func (e *Engine) encodeImages(running []*request) []*request {
	if e.vision == nil {
		return running
	}
	out := running[:0]
	for _, r := range running {
		var err error
		for i := range r.images {
			img := &r.images[i]
			if img.embeds != nil || !r.Prefilling() {
				continue
			}
			start := time.Now()
			if img.embeds, err = e.rn.EncodeImage(img.px); err != nil {
				err = fmt.Errorf("encode image %d: %w", i+1, err)
				break
			}
			e.stats.encodeNanos.Add(int64(time.Since(start)))
			e.stats.imagesEncoded.Add(1)
		}
		if err != nil {
			e.finish(r, FinishAbort, err)
			continue
		}
		out = append(out, r)
	}
	return out
}
