package attention

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gosling-ai/gosling/tensor"
)

// Choice is what the user asked for on the command line.
type Choice struct {
	Backend string // --attention-backend: both phases ("" or "auto": choose)
	Prefill string // --prefill-attention-backend, or the first half of --attn
	Decode  string // --decode-attention-backend, or the second half of --attn
	// SpeculativeMode routes target verification: "prefill" (default) or "decode".
	SpeculativeMode string
	PageSize        int
	PageSizeSet     bool   // the user gave --page-size, so it may not be changed
	KVDType         string // --kv-cache-dtype: auto, float32, bf16, fp8_e4m3
}

// ParseAttn splits the --attn PREFILL,DECODE shorthand.
func ParseAttn(s string) (prefill, decode string, err error) {
	p, d, ok := strings.Cut(s, ",")
	if !ok || p == "" || d == "" || strings.Contains(d, ",") {
		return "", "", fmt.Errorf("--attn takes PREFILL,DECODE (two backend names), got %q", s)
	}
	return strings.TrimSpace(p), strings.TrimSpace(d), nil
}

// Adjustment is a setting Resolve changed, with the reason; they are
// logged at start-up, never applied silently.
type Adjustment struct {
	Setting, From, To, Reason string
}

func (a Adjustment) String() string {
	return fmt.Sprintf("%s %s -> %s: %s", a.Setting, a.From, a.To, a.Reason)
}

// Resolution is the outcome: which backend serves each phase, and the
// settings they run with.
type Resolution struct {
	Prefill, Decode  Entry
	PageSize         int
	KVDType          tensor.DType
	VerifyWithDecode bool
	Adjustments      []Adjustment
}

// Order lists backend names in the order auto prefers them for a phase.
type Order struct {
	Prefill, Decode []string
}

// ParseKVDType maps --kv-cache-dtype to a storage dtype ("auto": float32,
// the CPU compute dtype).
func ParseKVDType(s string) (tensor.DType, error) {
	switch strings.ToLower(s) {
	case "", "auto", "float32", "fp32", "f32":
		return tensor.F32, nil
	case "bf16", "bfloat16":
		return tensor.BF16, nil
	case "fp8_e4m3", "fp8", "fp8_e4m3fn":
		return tensor.FP8E4M3, nil
	}
	return 0, fmt.Errorf("--kv-cache-dtype %q is not one of auto, float32, bf16, fp8_e4m3", s)
}

// DefaultPageSize is the page size when --page-size is not given: 16 on
// the CPU (vLLM's default block size), 1 elsewhere (SGLang's). On the CPU
// a decode step's attention streams every request's K and V rows from
// memory, and the hardware prefetchers keep full bandwidth only along a
// contiguous run: with one-token pages the requests' tokens interleave in
// the pool and every row is a separate 3 KiB stream (a stories110M-shaped
// batch of 32 read its KV at about 10 GB/s a core with one-token pages,
// 22 GB/s with 16). Prefix sharing then matches whole pages.
func DefaultPageSize(device string) int {
	if device == "" || device == "cpu" {
		return 16
	}
	return 1
}

// Resolve turns the user's choice, the device and the model's needs into
// a Resolution, or an error that says what to use instead. It is the only
// place where these rules live.
func Resolve(entries []Entry, order Order, c Choice, need Need) (*Resolution, error) {
	res := &Resolution{PageSize: c.PageSize}
	if res.PageSize == 0 {
		res.PageSize = DefaultPageSize(need.Device)
	}
	if res.PageSize < 0 {
		return nil, fmt.Errorf("--page-size must be positive, got %d", c.PageSize)
	}
	var err error
	if res.KVDType, err = ParseKVDType(c.KVDType); err != nil {
		return nil, err
	}
	switch c.SpeculativeMode {
	case "", "prefill":
	case "decode":
		res.VerifyWithDecode = true
	default:
		return nil, fmt.Errorf("--speculative-attention-mode must be prefill or decode, got %q", c.SpeculativeMode)
	}
	// A backend may have one entry per device (its CPU and CUDA
	// implementations, each with its own capabilities): the entry for the
	// run's device wins; another device's entry still answers the name, so
	// the error can say where it does run.
	byName := map[string]Entry{}
	var names []string
	for _, e := range entries {
		prev, seen := byName[e.Name]
		if !seen {
			names = append(names, e.Name)
		}
		if !seen || (!slices.Contains(prev.Caps.Devices, need.Device) && slices.Contains(e.Caps.Devices, need.Device)) {
			byName[e.Name] = e
		}
	}
	phaseName := func(specific string) string {
		if specific != "" {
			return specific
		}
		return c.Backend
	}
	// Capabilities are checked with the page size set aside: a page size
	// that does not fit can be adjusted below when the user did not set it.
	needNoPage := need
	needNoPage.PageSize = 0
	needPage := need
	needPage.PageSize = res.PageSize
	pick := func(phase, name string, prefs []string) (Entry, error) {
		if name == "" || name == "auto" {
			// First choice: a backend that also reads this page size
			// natively; failing that (page size unset), any that serves
			// the model, with the page size adjusted below.
			tries := []Need{needPage}
			if !c.PageSizeSet {
				tries = append(tries, needNoPage)
			}
			var why []string
			for _, n := range tries {
				for _, name := range append(slices.Clone(prefs), names...) {
					e, ok := byName[name]
					if !ok {
						continue
					}
					unmet := append(e.Caps.Unmet(n), dtypeUnmet(e.Caps, res.KVDType)...)
					if len(unmet) == 0 {
						if err := e.Unavailable(); err != nil {
							why = append(why, fmt.Sprintf("%s is not offered here (%v)", e.Name, err))
							continue
						}
						return e, nil
					}
					why = append(why, e.Name+" "+strings.Join(unmet, "; "))
				}
			}
			slices.Sort(why)
			return Entry{}, fmt.Errorf("no %s attention backend can serve this model: %s", phase, strings.Join(slices.Compact(why), " | "))
		}
		e, ok := byName[name]
		if !ok {
			return Entry{}, fmt.Errorf("unknown attention backend %q; choose one of: %s, auto", name, strings.Join(names, ", "))
		}
		if unmet := append(e.Caps.Unmet(needNoPage), dtypeUnmet(e.Caps, res.KVDType)...); len(unmet) > 0 {
			return Entry{}, fmt.Errorf("%s attention backend %q %s; run `gosling backends` to see which backend supports it", phase, name, strings.Join(unmet, "; "))
		}
		return e, nil
	}
	if res.Prefill, err = pick("prefill", phaseName(c.Prefill), order.Prefill); err != nil {
		return nil, err
	}
	if res.Decode, err = pick("decode", phaseName(c.Decode), order.Decode); err != nil {
		return nil, err
	}
	if err := res.fitPageSize(c.PageSizeSet); err != nil {
		return nil, err
	}
	// Availability last: what a backend could never do is reported
	// first, wherever it runs.
	for _, p := range []struct {
		phase string
		e     Entry
	}{{"prefill", res.Prefill}, {"decode", res.Decode}} {
		if err := p.e.Unavailable(); err != nil {
			return nil, fmt.Errorf("%s attention backend %q is not offered here: %w", p.phase, p.e.Name, err)
		}
	}
	return res, nil
}

func dtypeUnmet(c Caps, dt tensor.DType) []string {
	if slices.Contains(c.KVDTypes, dt) {
		return nil
	}
	return []string{fmt.Sprintf("does not support KV cache dtype %v", dt)}
}

// fitPageSize keeps the page size when both backends read it natively;
// otherwise it picks one both accept (when the user left it unset) or
// explains the conflict.
func (r *Resolution) fitPageSize(userSet bool) error {
	p, d := r.Prefill.Caps.PageSizes, r.Decode.Caps.PageSizes
	if p.Allows(r.PageSize) && d.Allows(r.PageSize) {
		return nil
	}
	var common []int
	switch {
	case p.Any:
		common = d.Only
	case d.Any:
		common = p.Only
	default:
		for _, s := range p.Only {
			if slices.Contains(d.Only, s) {
				common = append(common, s)
			}
		}
	}
	pair := fmt.Sprintf("prefill backend %s supports page sizes %v, decode backend %s supports %v", r.Prefill.Name, p, r.Decode.Name, d)
	if len(common) == 0 {
		return fmt.Errorf("these backends cannot share a KV cache: %s; choose a compatible pair (see `gosling backends`)", pair)
	}
	if userSet {
		return fmt.Errorf("--page-size %d is not supported: %s; use --page-size %d", r.PageSize, pair, common[0])
	}
	r.Adjustments = append(r.Adjustments, Adjustment{Setting: "page size", From: fmt.Sprint(r.PageSize), To: fmt.Sprint(common[0]), Reason: pair})
	r.PageSize = common[0]
	return nil
}

// Build constructs the backend(s): one when both phases use the same
// entry, else the Hybrid composite.
func (r *Resolution) Build(opts Options) (Backend, error) {
	prefill, err := r.Prefill.New(opts)
	if err != nil {
		return nil, fmt.Errorf("attention backend %s: %w", r.Prefill.Name, err)
	}
	if r.Prefill.Name == r.Decode.Name && !r.VerifyWithDecode {
		return prefill, nil
	}
	decode := prefill
	if r.Decode.Name != r.Prefill.Name {
		if decode, err = r.Decode.New(opts); err != nil {
			return nil, fmt.Errorf("attention backend %s: %w", r.Decode.Name, err)
		}
	}
	return &Hybrid{PrefillBackend: prefill, DecodeBackend: decode, VerifyWithDecode: r.VerifyWithDecode}, nil
}
