package blocks

import (
	"fmt"
	"math"
	"strconv"

	"github.com/gosling-ai/gosling/device"
	"github.com/gosling-ai/gosling/model"
	"github.com/gosling-ai/gosling/tensor"
)

// MoE is a mixture-of-experts block: the routed experts chosen per token,
// weighted by the router, plus an optional shared expert every token goes
// through, optionally behind a sigmoid gate.
type MoE struct {
	Router  device.Router
	Gate    device.Matrix // router logits: [experts, hidden] (with a bias in GPT-OSS)
	Experts []*MLP
	Shared  *MLP // nil without a shared expert
	// SharedGate [1, hidden], when set, scales the shared expert's output
	// of each token by sigmoid(x·w) (Qwen2-MoE); nil: added as is.
	SharedGate device.Matrix

	// group is Experts as a device.ExpertOps device prepared them (Group);
	// nil: they run one by one.
	group device.ExpertGroup
}

// Group prepares the routed experts to run grouped on a device that can
// (device.ExpertOps), with act their activation (each MLP's Act does the
// same when they run one by one). Other devices are left as they are.
func (m *MoE) Group(ops device.Ops, act device.ExpertActivation) error {
	eo, ok := ops.(device.ExpertOps)
	if !ok || len(m.Experts) == 0 {
		return nil
	}
	gate, up, down := make([]device.Matrix, len(m.Experts)), make([]device.Matrix, len(m.Experts)), make([]device.Matrix, len(m.Experts))
	for i, e := range m.Experts {
		if e == nil || e.Gate == nil || e.Up == nil || e.Down == nil {
			return nil // a load error, reported by the loader
		}
		gate[i], up[i], down[i] = e.Gate, e.Up, e.Down
	}
	g, err := eo.ExpertGroup(gate, up, down, act)
	if err != nil {
		return err
	}
	m.group = g
	return nil
}

// releaser is a device that can take a forward's tensors back early
// (cuda.ModelOps): the routed experts' activations are dead once added to
// the residual, and a long prefill would otherwise hold every expert's.
type releaser interface{ Release(ts ...tensor.T) }

// AddTo adds the block's output for x [T, hidden] (the normalised
// residual) to residual [T, hidden]. Each routed expert runs once over
// all the tokens routed to it, so its weights are read once per forward,
// not once per token. A device that routes on the device
// (device.RoutedExpertOps) chooses, dispatches and combines there, with
// nothing read back, so that the step can be a graph; otherwise the
// choice comes to the host (Route) and the experts run grouped on a
// device that can (Group), else one at a time, their outputs added back
// to their tokens' rows, weighted by the router.
func (m *MoE) AddTo(ops device.Ops, residual, x tensor.T) {
	rel, _ := ops.(releaser)
	logits := ops.Linear(x, m.Gate) // [T, experts]
	dr, onDevice := ops.(device.RoutedExpertOps)
	if !onDevice || m.group == nil || !dr.RoutedExpertsAdd(residual, x, logits, &m.Router, m.group) {
		experts, weights := ops.Route(logits, &m.Router) // [T*k] each, on the host
		if eo, ok := ops.(device.ExpertOps); !ok || m.group == nil || !eo.ExpertsAdd(residual, x, m.group, experts, weights) {
			m.expertsOneByOne(ops, rel, residual, x, experts, weights)
		}
	}
	if rel != nil {
		rel.Release(logits)
	}
	if m.Shared == nil {
		return
	}
	y := m.Shared.Forward(ops, x)
	switch {
	case m.SharedGate == nil:
		ops.Add(residual, y)
	case onDevice:
		dr.SigmoidGatedAdd(residual, y, ops.Linear(x, m.SharedGate))
	default:
		// The gate is one logit per token; its sigmoid is taken on the
		// host, which the routing above has already waited for, and
		// applied by the scatter that adds the rows.
		g := ops.ToHost(ops.Linear(x, m.SharedGate)) // [T, 1]
		rows, scales := make([]int32, len(g.HostData())), make([]float32, len(g.HostData()))
		for t, logit := range g.HostData() {
			rows[t], scales[t] = int32(t), sigmoid(logit)
		}
		ops.ScatterAddRows(residual, y, rows, scales)
	}
}

// expertsOneByOne runs each chosen expert once over all the tokens routed
// to it.
func (m *MoE) expertsOneByOne(ops device.Ops, rel releaser, residual, x tensor.T, experts []int32, weights []float32) {
	k := m.Router.TopK
	// Bucket the (token, weight) pairs by expert; a token's k experts are
	// distinct, so each bucket's rows are too.
	tokens := make([][]int32, len(m.Experts))
	tokWeights := make([][]float32, len(m.Experts))
	for i, e := range experts {
		tokens[e] = append(tokens[e], int32(i/k))
		tokWeights[e] = append(tokWeights[e], weights[i])
	}
	for e, rows := range tokens {
		if len(rows) == 0 {
			continue
		}
		in := ops.GatherRows(x, rows)      // [tokens of e, hidden]
		y := m.Experts[e].Forward(ops, in) // [tokens of e, hidden]
		ops.ScatterAddRows(residual, y, rows, tokWeights[e])
		if rel != nil {
			rel.Release(in, y)
		}
	}
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// RouterOf is the config's routing rule (device.Router states it):
// DeepSeek-V3's noaux_tc ranks groups by their two best biased choices,
// group_limited_greedy (V2) by their best score, and greedy (every other
// MoE) does not group.
func RouterOf(e model.MoEConfig) device.Router {
	r := device.Router{
		TopK:     e.NumExpertsPerTok,
		Softmax:  e.ScoringFunc == "softmax",
		NormTopK: e.NormTopKProb,
		Scale:    float32(e.RoutedScaling),
	}
	if e.TopKMethod != "greedy" {
		r.Groups, r.TopKGroups = e.NumGroups, e.TopKGroups
		r.GroupByMaxScore = e.TopKMethod == "group_limited_greedy"
	}
	return r
}

// MoENames are where a checkpoint keeps a MoE block's tensors, relative
// to the layer's MLP prefix.
type MoENames struct {
	Router     string    // the router's linear ("gate")
	Experts    string    // expert i is under Experts + ".<i>."
	Proj       [3]string // gate, up and down projections of an expert
	Shared     string    // the shared expert ("" if none)
	SharedGate string    // the shared expert's sigmoid gate ("" if none)
}

// MoE loads a block of the config's shape: the router (with its bias when
// the checkpoint has one), every routed expert, and the shared expert when
// the config has one. A router whose expert count disagrees with the
// config is reported before any expert is read.
func (l *Loader) MoE(e model.MoEConfig, hidden int, prefix string, n MoENames) *MoE {
	m := &MoE{Router: RouterOf(e)}
	if w, err := l.WS.Tensor(prefix + n.Router + ".weight"); err == nil && len(w.Shape) == 2 && w.Shape[0] != e.NumRoutedExperts {
		l.Fail(fmt.Errorf("tensor %s has %d experts, but config.json %s is %d", w.Name, w.Shape[0], e.ExpertsKey, e.NumRoutedExperts))
	}
	m.Gate = l.Linear(prefix+n.Router, e.NumRoutedExperts, hidden, false)
	if err := m.Router.Check(e.NumRoutedExperts); err != nil {
		l.Fail(err)
	}
	if fused := prefix + n.Experts + ".gate_up_proj"; l.WS.Has(fused) {
		// transformers' fused layout: gate_up_proj [experts, 2·inter,
		// hidden], each expert's gate rows then its up rows, and
		// down_proj [experts, hidden, inter]; each expert is a view.
		inter := e.IntermediateSize
		gateUp := l.Get(fused, e.NumRoutedExperts, 2*inter, hidden)
		down := l.Get(prefix+n.Experts+".down_proj", e.NumRoutedExperts, hidden, inter)
		for i := range e.NumRoutedExperts {
			gu := l.Expert(gateUp, i)
			m.Experts = append(m.Experts, &MLP{
				Gate: l.Matrix(l.Rows(gu, 1, 0, inter), nil),
				Up:   l.Matrix(l.Rows(gu, 1, inter, inter), nil),
				Down: l.Matrix(l.Expert(down, i), nil),
			})
		}
	} else {
		for i := range e.NumRoutedExperts {
			m.Experts = append(m.Experts, l.MLP(prefix+n.Experts+"."+strconv.Itoa(i)+".", n.Proj, hidden, e.IntermediateSize))
		}
	}
	if n.Shared != "" && e.SharedIntermediateSize > 0 {
		m.Shared = l.MLP(prefix+n.Shared+".", ProjNames, hidden, e.SharedIntermediateSize)
		if n.SharedGate != "" {
			m.SharedGate = l.Weight(prefix+n.SharedGate+".weight", 1, hidden)
		}
	}
	if l.Err == nil {
		l.Fail(m.Group(l.Ops, device.ExpertActivation{}))
	}
	return m
}

// MoEShapes adds a block's tensors to a weight list (see MoE).
func MoEShapes(out map[string][]int, e model.MoEConfig, hidden int, prefix string, n MoENames) {
	out[prefix+n.Router+".weight"] = []int{e.NumRoutedExperts, hidden}
	for i := range e.NumRoutedExperts {
		MLPShapes(out, prefix+n.Experts+"."+strconv.Itoa(i)+".", n.Proj, hidden, e.IntermediateSize)
	}
	if n.Shared != "" && e.SharedIntermediateSize > 0 {
		MLPShapes(out, prefix+n.Shared+".", ProjNames, hidden, e.SharedIntermediateSize)
		if n.SharedGate != "" {
			out[prefix+n.SharedGate+".weight"] = []int{1, hidden}
		}
	}
}

// MLPShapes adds an MLP's tensors to a weight list (see Loader.MLP).
func MLPShapes(out map[string][]int, prefix string, names [3]string, hidden, inter int) {
	out[prefix+names[0]+".weight"] = []int{inter, hidden}
	out[prefix+names[1]+".weight"] = []int{inter, hidden}
	out[prefix+names[2]+".weight"] = []int{hidden, inter}
}
