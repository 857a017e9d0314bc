package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/vision"
)

// Image is one image of a request, in the order of the prompt's image
// placeholders: decoded (the engine preprocesses it with the model's image
// processor) or already preprocessed.
type Image struct {
	Decoded *vision.Image
	Pixels  *vision.Pixels
}

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

// reqImage is an image as the scheduler uses it.
type reqImage struct {
	px     *vision.Pixels
	span   model.ImageSpan
	key    int       // the prefix-cache key of its placeholder tokens
	embeds []float32 // the vision tower's output, [span.Len, hidden]; nil until first needed
}

// vision is the engine's image side, nil for text-only models.
type visionState struct {
	model model.VisionRunnable
	proc  *vision.Processor // nil: only preprocessed pixels are accepted
	cfg   *model.VisionConfig
}

// initVision loads the image processor of a vision-language model.
func (e *Engine) initVision() error {
	vm, ok := e.model.(model.VisionRunnable)
	if !ok {
		return nil
	}
	e.vision = &visionState{model: vm, cfg: e.model.Config().Vision}
	path := filepath.Join(e.checkpoint.Path, "preprocessor_config.json")
	if _, err := os.Stat(path); err != nil {
		e.log.Warn("no preprocessor_config.json: images must come preprocessed", "path", path)
		return nil
	}
	proc, err := vision.LoadProcessor(path)
	if err != nil {
		return fmt.Errorf("load image processor: %w", err)
	}
	e.vision.proc = proc
	return nil
}

// SupportsImages reports whether the model reads images.
func (e *Engine) SupportsImages() bool { return e.vision != nil }

// prepareImages preprocesses a request's images, expands single
// placeholders in ids to the image's length, and lays the images out.
// It runs on the caller's goroutine: the scheduler only encodes.
func (e *Engine) prepareImages(imgs []Image, ids []int) (*imageLayout, []int, error) {
	r := &imageLayout{}
	if len(imgs) == 0 {
		return r, ids, nil
	}
	if e.vision == nil {
		return nil, nil, fmt.Errorf("model %s does not accept images", e.model.Config().Architecture)
	}
	if limit := e.maxImages(); len(imgs) > limit {
		return nil, nil, fmt.Errorf("the request has %d images; at most %d are allowed per request", len(imgs), limit)
	}
	vc := e.vision.cfg
	r.images = make([]reqImage, len(imgs))
	for i, img := range imgs {
		ri := &r.images[i]
		var hash [32]byte
		switch {
		case img.Pixels != nil:
			ri.px = img.Pixels
			h := sha256.New()
			binary.Write(h, binary.LittleEndian, img.Pixels.Data)
			copy(hash[:], h.Sum(nil))
		case img.Decoded != nil:
			if e.vision.proc == nil {
				return nil, nil, fmt.Errorf("model has no preprocessor_config.json: images cannot be preprocessed")
			}
			px, err := e.vision.proc.Preprocess(img.Decoded.RGB)
			if err != nil {
				return nil, nil, fmt.Errorf("image %d: %w", i+1, err)
			}
			ri.px, hash = &px, img.Decoded.Hash
		default:
			return nil, nil, fmt.Errorf("image %d is empty", i+1)
		}
		// Negative keys never collide with token ids; tokens of different
		// images get different keys, so they never share a cached prefix.
		ri.key = -1 - int(binary.LittleEndian.Uint32(hash[:])&math.MaxInt32)
	}
	// Placeholder runs: image_token_id repeated; a run of one expands to
	// the image's length (a prompt whose template wrote one placeholder).
	var out []int
	k := 0
	for i := 0; i < len(ids); {
		if ids[i] != vc.ImageTokenID {
			out = append(out, ids[i])
			i++
			continue
		}
		j := i
		for j < len(ids) && ids[j] == vc.ImageTokenID {
			j++
		}
		if k >= len(r.images) {
			return nil, nil, fmt.Errorf("the prompt has more image placeholders than the request's %d images", len(r.images))
		}
		n := e.vision.model.ImageTokens(r.images[k].px)
		if j-i != n && j-i != 1 {
			return nil, nil, fmt.Errorf("image %d has %d placeholder tokens in the prompt; it needs %d (or a single one to expand)", k+1, j-i, n)
		}
		r.images[k].span = model.ImageSpan{Start: len(out), Len: n, Grid: r.images[k].px.Grid}
		for range n {
			out = append(out, vc.ImageTokenID)
		}
		k++
		i = j
	}
	if k != len(r.images) {
		return nil, nil, fmt.Errorf("the prompt has %d image placeholders for %d images", k, len(r.images))
	}
	spans := make([]model.ImageSpan, len(r.images))
	for i := range r.images {
		spans[i] = r.images[i].span
	}
	r.mrope, r.ropeDelta, r.spans = e.vision.model.Layout(out, spans)
	r.promptKeys = append([]int(nil), out...)
	for _, img := range r.images {
		for t := img.span.Start; t < img.span.Start+img.span.Len; t++ {
			r.promptKeys[t] = img.key
		}
	}
	return r, out, nil
}

// ExpandImageText puts the model's image placeholder text into a text
// prompt as the Hugging Face processors do, so that the tokenizer sees it.
// Qwen2-VL: each <|image_pad|> stays one token here and is expanded by
// prepareImages. Gemma 3: each <start_of_image> becomes
// "\n\n<start_of_image><image_soft_token><end_of_image>\n\n".
func (e *Engine) ExpandImageText(prompt string) string {
	if e.vision == nil || e.tok == nil || e.vision.cfg.MMTokensPerImage == 0 || e.vision.cfg.StartTokenID < 0 {
		return prompt
	}
	boi, img, eoi := e.tok.TokenString(e.vision.cfg.StartTokenID), e.tok.TokenString(e.vision.cfg.ImageTokenID), e.tok.TokenString(e.vision.cfg.EndTokenID)
	if boi == "" || img == "" || strings.Contains(prompt, img) {
		return prompt
	}
	return strings.ReplaceAll(prompt, boi, "\n\n"+boi+img+eoi+"\n\n")
}

// ImagePlaceholderText is what a chat message holds where an image goes,
// as the models' chat templates write it: Qwen2-VL's
// <|vision_start|><|image_pad|><|vision_end|>, Gemma 3's <start_of_image>
// (which ExpandImageText completes). "" for text-only models or models
// without a tokenizer.
func (e *Engine) ImagePlaceholderText() string {
	if e.vision == nil || e.tok == nil {
		return ""
	}
	vc := e.vision.cfg
	if vc.MMTokensPerImage > 0 {
		return e.tok.TokenString(vc.StartTokenID)
	}
	return e.tok.TokenString(vc.StartTokenID) + e.tok.TokenString(vc.ImageTokenID) + e.tok.TokenString(vc.EndTokenID)
}

func (e *Engine) maxImages() int {
	if e.cfg.MaxImages > 0 {
		return e.cfg.MaxImages
	}
	return DefaultMaxImages
}

// encodeImages runs the vision tower over the images of requests about
// to prefill, each image whole and once per request (a chunked prefill
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
			err = e.rt.Run(func() error {
				enc, err := e.vision.model.EncodeImage(img.px, e.attn)
				img.embeds = enc.Data
				return err
			})
			if err != nil {
				err = fmt.Errorf("encode image %d: %w", i+1, err)
				break
			}
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

// addImageInputs adds request r's image embeddings and bidirectional
// spans for its new tokens [from, from+n), which sit at batch rows
// start.. of batch request req.
func addImageInputs(b *forward.Batch, r *request, req, start, from, n int) {
	for i := range r.images {
		img := &r.images[i]
		lo, hi := max(from, img.span.Start), min(from+n, img.span.Start+img.span.Len)
		if lo >= hi {
			continue
		}
		width := len(img.embeds) / img.span.Len
		for t := lo; t < hi; t++ {
			b.EmbedRows = append(b.EmbedRows, int32(start+t-from))
			off := (t - img.span.Start) * width
			b.EmbedData = append(b.EmbedData, img.embeds[off:off+width]...)
		}
	}
	for _, s := range r.Spans {
		if s[1] > from && s[0] < from+n {
			b.Spans = append(b.Spans, forward.Span{Req: int32(req), Start: int32(s[0]), End: int32(s[1])})
		}
	}
}

// fillMRope gives every token of a batch that holds an M-RoPE request its
// three position streams (text-only requests: three equal ones). plans
// are (request, first new token, count) in batch order.
func fillMRope(b *forward.Batch, reqs []*request, froms, counts []int) {
	need := false
	for _, r := range reqs {
		need = need || r.mrope != nil
	}
	if !need {
		return
	}
	total := len(b.InputIDs)
	b.MRopePositions = make([]int32, 3*total)
	row := 0
	for k, r := range reqs {
		nPrompt := r.NumPrompt
		for i := froms[k]; i < froms[k]+counts[k]; i++ {
			for s := range 3 {
				p := int32(i + r.ropeDelta)
				if r.mrope != nil && i < nPrompt {
					p = r.mrope[s*nPrompt+i]
				}
				b.MRopePositions[s*total+row] = p
			}
			row++
		}
	}
}
