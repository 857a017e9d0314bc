package deepseek

import (
	"github.com/gosling-ai/gosling/model"
)

// ropeParams returns the rotary inverse frequencies for the dim rope values
// of each head, the factor YaRN multiplies cos and sin by, and the mscale
// whose square multiplies the softmax scale (DeepSeek's mscale_all_dim
// correction; 1 without YaRN).
func ropeParams(cfg *model.Config, dim int) (invFreq []float32, ropeFactor float32, mscale float64) {
	invFreq, mscale = cfg.RopeInvFreq(dim), 1
	if s := cfg.RopeScaling; s != nil && s.Type == "yarn" && s.MScaleAllDim != 0 {
		mscale = model.YarnMScale(cfg.RopeFactor(), s.MScaleAllDim)
	}
	return invFreq, float32(cfg.RopeAttentionFactor()), mscale
}
