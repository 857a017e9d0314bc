package model

import (
	"fmt"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/forward"
	"github.com/gosling-ai/gosling/tensor"
	"github.com/gosling-ai/gosling/vision"
)

// VisionRunnable is a Runnable that also reads images (found by type
// assertion). The engine encodes each image once, then places the
// embeddings at the image's placeholder tokens through the batch
// (forward.Batch.EmbedRows).
type VisionRunnable interface {
	Runnable
	// ImageTokens is the number of placeholder tokens an image takes.
	ImageTokens(px *vision.Pixels) int
	// EncodeImage runs the vision tower on one preprocessed image and
	// returns its embeddings on the host: [ImageTokens(px), hidden].
	EncodeImage(px *vision.Pixels, attn attention.Backend) (tensor.T, error)
	// Layout places a prompt's images: the M-RoPE position streams of
	// every prompt token and the offset of the positions of tokens after
	// it (nil, 0 for models with 1-D positions), and the bidirectional
	// spans attention must honour ([start, end) token ranges; nil when the
	// model attends causally over images).
	Layout(ids []int, images []ImageSpan) (mrope []int32, delta int, spans [][2]int)
}

// ImageSpan is one image's placeholder run in a prompt.
type ImageSpan struct {
	Start, Len int
	Grid       [3]int // the processor's (t, h, w) patch grid, zero for fixed-size images
	// SecondsPerGrid is a video's seconds per temporal patch (Qwen2.5-VL's
	// second_per_grid_ts); 0 for an image.
	SecondsPerGrid float64
}

// SpliceEmbeds puts b's precomputed embeddings (image features) into the
// residual stream x at their rows. A batch without them is left alone.
func SpliceEmbeds(ops device.Ops, x tensor.T, b *forward.Batch) error {
	if len(b.EmbedRows) == 0 {
		return nil
	}
	vo, ok := ops.(device.VisionOps)
	if !ok {
		return fmt.Errorf("device %s cannot place image embeddings (no VisionOps)", ops.Name())
	}
	width := x.Cols()
	if len(b.EmbedData) != len(b.EmbedRows)*width {
		return fmt.Errorf("%d embedding values for %d rows of width %d", len(b.EmbedData), len(b.EmbedRows), width)
	}
	vo.SetRows(x, b.EmbedRows, tensor.From(b.EmbedData, len(b.EmbedRows), width))
	return nil
}

// MRope is Qwen2-VL's multimodal rotary embedding: the rotary frequencies
// are split into sections, each rotated by one position stream (temporal,
// height, width). Each stream's rope keeps only its section's inverse
// frequencies; the others are zero, whose rotation (cos 0 = 1, sin 0 = 0)
// is exactly the identity, so the three rotations in turn are M-RoPE.
type MRope struct {
	Streams [3]*device.Rope
}

// NewMRope splits invFreq ([headDim/2]) into sections (which sum to
// headDim/2).
func NewMRope(headDim int, invFreq []float32, sections []int, interleaved bool) (*MRope, error) {
	total := 0
	for _, s := range sections {
		total += s
	}
	if len(sections) != 3 || total != len(invFreq) {
		return nil, fmt.Errorf("mrope_section %v must be 3 sections summing to head_dim/2 = %d", sections, len(invFreq))
	}
	m := &MRope{}
	at := 0
	for s, n := range sections {
		f := make([]float32, len(invFreq))
		copy(f[at:at+n], invFreq[at:at+n])
		m.Streams[s] = &device.Rope{HeadDim: headDim, InvFreq: f, Interleaved: interleaved}
		at += n
	}
	return m, nil
}

// RopeQK rotates q and k by b's M-RoPE positions, or by b.Positions with
// plain rope when the batch has none (text only, whose streams are equal).
func (m *MRope) RopeQK(ops device.Ops, q, k tensor.T, b *forward.Batch, plain *device.Rope) {
	if b.MRopePositions == nil {
		ops.RopeQK(q, k, b.Positions, plain)
		return
	}
	n := len(b.InputIDs)
	for s, r := range m.Streams {
		ops.RopeQK(q, k, b.MRopePositions[s*n:(s+1)*n], r)
	}
}

// EncodeBatch is a vision encoder's forward over sequences of the given
// lengths (images, or attention windows of one image): every token
// attends to every token of its sequence, with no KV cache.
func EncodeBatch(seqLens []int) (*forward.Batch, error) {
	b := &forward.Batch{Mode: forward.Encode}
	for _, n := range seqLens {
		b.ReqRows = append(b.ReqRows, 0)
		b.PrefixLens = append(b.PrefixLens, 0)
		b.ExtendLens = append(b.ExtendLens, int32(n))
		for i := range n {
			b.InputIDs = append(b.InputIDs, 0)
			b.Positions = append(b.Positions, int32(i))
			b.OutSlots = append(b.OutSlots, -1) // no cache: never written
		}
	}
	return b, b.Finalize()
}
