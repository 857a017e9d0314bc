package spec

// NGramDrafter proposes continuations the request has already seen: it
// matches the last n tokens of the request's prompt and output (n from
// MaxMatch down to MinMatch) against earlier places in the same tokens and
// drafts what followed there, merging several such candidates into one
// token tree. It keeps no state and needs no weights (prompt lookup
// decoding; SGLang's NGRAM also learns from other requests' outputs, which
// this drafter does not).
type NGramDrafter struct {
	MinMatch, MaxMatch int // suffix lengths tried, longest first
	MaxDepth           int // --speculative-num-steps
	MaxNodes           int // --speculative-num-draft-tokens, the root included
	TopK               int // most children per node
}

// NewNGramDrafter makes the drafter of a normalized Config. Suffixes of 1
// to 8 tokens are matched, SGLang's defaults being 1 to 12: on a CPU the
// scan is the drafter's cost and matches longer than 8 change little.
func NewNGramDrafter(c Config) *NGramDrafter {
	return &NGramDrafter{MinMatch: 1, MaxMatch: 8, MaxDepth: c.NumSteps, MaxNodes: c.NumDraftTokens, TopK: c.TopK}
}

// Draft returns the tree for a request whose tokens (prompt then output)
// are tokens; the last of them is the root. Candidates are ordered by
// match length, then by recency; their tokens are inserted level by level
// (every candidate's first token, then every second …) so that the node
// budget goes to alternatives near the root before deep guesses.
func (g *NGramDrafter) Draft(tokens []int) Tree {
	tree := NewTree(tokens[len(tokens)-1])
	if g.MaxNodes < 2 || g.MaxDepth < 1 {
		return tree
	}
	n := len(tokens)
	// Enough candidates to fill every branch; more only repeat them.
	maxCands := 2 * g.TopK
	var cands [][]int
	seen := map[int]bool{} // start of a continuation already taken
	for m := min(g.MaxMatch, n-1); m >= g.MinMatch && len(cands) < maxCands; m-- {
		suffix := tokens[n-m:]
		// An occurrence ending at e (exclusive) with e < n is followed by
		// tokens[e:]; the most recent first.
		for e := n - 1; e >= m && len(cands) < maxCands; e-- {
			if seen[e] || !equal(tokens[e-m:e], suffix) {
				continue
			}
			seen[e] = true
			cands = append(cands, tokens[e:min(n, e+g.MaxDepth)])
		}
	}
	at := make([]int, len(cands)) // each candidate's node so far, -1 when cut
	for level := 0; level < g.MaxDepth && tree.Len() < g.MaxNodes; level++ {
		grew := false
		for c, cand := range cands {
			if level >= len(cand) || at[c] < 0 {
				continue
			}
			parent := at[c]
			if child := tree.Child(parent, cand[level]); child >= 0 {
				at[c], grew = child, true
				continue
			}
			if len(tree.Children(parent)) >= g.TopK || tree.Len() >= g.MaxNodes {
				at[c] = -1
				continue
			}
			at[c], grew = tree.Add(parent, cand[level]), true
		}
		if !grew {
			break
		}
	}
	return tree
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
