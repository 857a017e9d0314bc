package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/gosling-ai/gosling/attention"
	"github.com/gosling-ai/gosling/model"
	modelregistry "github.com/gosling-ai/gosling/model/registry"
)

type modelKVCmd struct {
	Config       []string `arg:"" help:"config.json files or model directories (weights are not read)." type:"path"`
	KVCacheDType string   `help:"KV storage dtype for the figures: float32, bf16, fp8_e4m3." default:"bf16" name:"kv-cache-dtype"`
	JSON         bool     `help:"Print JSON lines." name:"json"`
}

type kvRow struct {
	Model          string `json:"model"`
	Architecture   string `json:"architecture"`
	Layers         int    `json:"layers"`
	ValuesPerLayer int    `json:"values_per_token_per_layer"`
	BytesPerToken  int    `json:"bytes_per_token"`
	WindowedLayers int    `json:"windowed_layers,omitempty"`
	Window         int    `json:"window,omitempty"`
	// MHABytesPerToken is what a standard cache of every head would need
	// (MLA models only): heads × (qk_nope + qk_rope + v_head_dim).
	MHABytesPerToken int `json:"mha_bytes_per_token,omitempty"`
}

// Run prints the KV cache bytes per token of each model, from its config
// alone, as the engine would lay the cache out.
func (c *modelKVCmd) Run() error {
	dt, err := attention.ParseKVDType(c.KVCacheDType)
	if err != nil {
		return err
	}
	elem := map[string]int{"F32": 4, "BF16": 2, "FP8_E4M3": 1}[dt.String()]
	var rows []kvRow
	for _, path := range c.Config {
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			path = filepath.Join(path, "config.json")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cfg, err := model.ParseHFConfig(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		arch, err := modelregistry.Lookup(cfg.Architecture)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		spec := arch.KVSpec(&cfg)
		spec.DType = dt
		row := kvRow{Model: filepath.Base(filepath.Dir(path)), Architecture: cfg.Architecture, Layers: spec.NumLayers,
			ValuesPerLayer: spec.KWidth() + spec.VWidth(), BytesPerToken: spec.BytesPerToken()}
		if w := windowedLayers(&cfg); w > 0 {
			row.WindowedLayers, row.Window = w, cfg.SlidingWindow
			// Windowed layers hold a fixed region: only full layers grow.
			row.BytesPerToken = (spec.NumLayers - w) * (spec.KWidth() + spec.VWidth()) * elem
		}
		if spec.SharedV {
			m := cfg.MLA
			row.MHABytesPerToken = cfg.NumLayers * cfg.NumHeads * (m.QKNopeHeadDim + m.QKRopeHeadDim + m.VHeadDim) * elem
		}
		rows = append(rows, row)
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintf(w, "model\tarchitecture\tlayers\tvalues/token/layer\tKV bytes/token (%v)\tnote\n", dt)
	for _, r := range rows {
		note := ""
		if r.WindowedLayers > 0 {
			note = fmt.Sprintf("%d windowed layers keep only %d tokens (not counted)", r.WindowedLayers, r.Window)
		}
		if r.MHABytesPerToken > 0 {
			note = fmt.Sprintf("MLA latent cache; a standard MHA cache would need %d bytes/token (%.1fx)", r.MHABytesPerToken, float64(r.MHABytesPerToken)/float64(r.BytesPerToken))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\n", r.Model, r.Architecture, r.Layers, r.ValuesPerLayer, r.BytesPerToken, note)
	}
	return w.Flush()
}

func windowedLayers(cfg *model.Config) int {
	n := 0
	for i := range cfg.NumLayers {
		if cfg.LayerWindow(i) > 0 {
			n++
		}
	}
	return n
}
