// Package spec holds what speculative decoding needs besides the model:
// the algorithm settings as SGLang spells them, the draft token tree and
// its attention mask, and the n-gram drafter. Verification (one
// TargetVerify forward per step, acceptance, KV compaction) is the
// engine's; the acceptance rule for one tree node is sample.Sampler's.
package spec

import (
	"fmt"
	"strings"
)

// Algorithm is --speculative-algorithm.
type Algorithm string

const (
	None       Algorithm = ""
	NGram      Algorithm = "NGRAM"
	Standalone Algorithm = "STANDALONE"
	Eagle      Algorithm = "EAGLE"
	Eagle3     Algorithm = "EAGLE3"
)

// Config is the speculative-decoding settings (SGLang's
// --speculative-* flags). Zero numbers mean "the algorithm's default".
type Config struct {
	Algorithm      Algorithm
	DraftModelPath string
	// NumSteps is the tree depth: the most draft tokens one step can
	// accept (the bonus token comes on top).
	NumSteps int
	// TopK is the branching: the most children a tree node has (n-gram:
	// the most distinct continuations kept per node; draft model: the
	// top-k expanded at each step).
	TopK int
	// NumDraftTokens is the tree size including its root, the request's
	// newest token: the tokens of one request in the verify forward.
	NumDraftTokens int
}

// Enabled reports whether an algorithm is set.
func (c Config) Enabled() bool { return c.Algorithm != None }

// ParseAlgorithm accepts SGLang's names in any case ("" and "none": off).
// NEXTN is SGLang's alias of EAGLE for MTP layers; gosling has no MTP
// weights loader, so it is refused by name rather than aliased.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch a := Algorithm(strings.ToUpper(strings.TrimSpace(s))); a {
	case "", "NONE":
		return None, nil
	case NGram, Standalone, Eagle, Eagle3:
		return a, nil
	}
	return None, fmt.Errorf("--speculative-algorithm must be NGRAM, STANDALONE, EAGLE or EAGLE3, got %q", s)
}

// Normalize validates c and fills the defaults. Every problem is a
// start-up error that says which flag to change; a flag that the chosen
// algorithm would not use is an error too, never silently ignored.
func (c Config) Normalize() (Config, error) {
	var err error
	if c.Algorithm, err = ParseAlgorithm(string(c.Algorithm)); err != nil {
		return c, err
	}
	if !c.Enabled() {
		if c.DraftModelPath != "" || c.NumSteps != 0 || c.TopK != 0 || c.NumDraftTokens != 0 {
			return c, fmt.Errorf("--speculative-draft-model-path, --speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens need --speculative-algorithm")
		}
		return c, nil
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--speculative-num-steps", c.NumSteps}, {"--speculative-eagle-topk", c.TopK}, {"--speculative-num-draft-tokens", c.NumDraftTokens}} {
		if f.v < 0 {
			return c, fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	switch c.Algorithm {
	case NGram:
		if c.DraftModelPath != "" {
			return c, fmt.Errorf("--speculative-algorithm NGRAM drafts from the request's own tokens; remove --speculative-draft-model-path (or use STANDALONE)")
		}
		// SGLang's NGRAM default is 12 draft tokens; a CPU forward's cost
		// grows with its tokens, so gosling starts smaller.
		def(&c.NumDraftTokens, 8)
		def(&c.NumSteps, c.NumDraftTokens-1)
		def(&c.TopK, 4)
	case Standalone:
		if c.DraftModelPath == "" {
			return c, fmt.Errorf("--speculative-algorithm STANDALONE needs --speculative-draft-model-path (a smaller model with the target's tokenizer)")
		}
		// SGLang's defaults for a draft model: 3 steps, top-1, 4 tokens.
		def(&c.NumSteps, 3)
		def(&c.TopK, 1)
		def(&c.NumDraftTokens, c.NumSteps*c.TopK+1)
	case Eagle, Eagle3:
		if c.DraftModelPath == "" {
			return c, fmt.Errorf("--speculative-algorithm %s needs --speculative-draft-model-path (the directory of an %s head: config.json and safetensors)", c.Algorithm, c.Algorithm)
		}
		// SGLang's defaults for EAGLE heads: 5 steps, top-4, 8 tokens (a
		// chain keeps every step).
		def(&c.NumSteps, 5)
		def(&c.TopK, 4)
		if c.TopK == 1 {
			def(&c.NumDraftTokens, c.NumSteps+1)
		}
		def(&c.NumDraftTokens, min(8, c.NumSteps*c.TopK+1))
	}
	if c.NumDraftTokens < 2 {
		return c, fmt.Errorf("--speculative-num-draft-tokens must be at least 2 (the newest token and one draft), got %d", c.NumDraftTokens)
	}
	if c.NumSteps < 1 {
		return c, fmt.Errorf("--speculative-num-steps must be at least 1, got %d", c.NumSteps)
	}
	if c.TopK < 1 {
		return c, fmt.Errorf("--speculative-eagle-topk must be at least 1, got %d", c.TopK)
	}
	// Asking for more draft tokens than the drafter's tree can hold is a
	// mistake: an n-gram tree of depth NumSteps and branching TopK holds
	// TopK + TopK² + …; a draft model or an EAGLE head keeps TopK nodes
	// per step.
	most := treeCapacity(c.NumSteps, c.TopK)
	if c.Algorithm != NGram {
		most = c.NumSteps * c.TopK
	}
	if c.NumDraftTokens-1 > most {
		return c, fmt.Errorf("--speculative-num-draft-tokens %d is more than a %s tree of depth %d (--speculative-num-steps) and branching %d (--speculative-eagle-topk) holds (%d drafts plus the root)",
			c.NumDraftTokens, c.Algorithm, c.NumSteps, c.TopK, most)
	}
	if c.TopK == 1 && c.NumDraftTokens != c.NumSteps+1 {
		return c, fmt.Errorf("with --speculative-eagle-topk 1 the tree is a chain: --speculative-num-draft-tokens must be --speculative-num-steps + 1 = %d, got %d", c.NumSteps+1, c.NumDraftTokens)
	}
	return c, nil
}

func def(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// treeCapacity is topK + topK² + … + topK^depth, capped to stay in int.
func treeCapacity(depth, topK int) int {
	total, level := 0, 1
	for range depth {
		level *= topK
		total += level
		if total > 1<<20 {
			return 1 << 20
		}
	}
	return total
}
