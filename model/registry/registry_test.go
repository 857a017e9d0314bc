package registry

import (
	"strings"
	"testing"

	"github.com/gosling-ai/gosling/model"
)

// TestBuildUnsupported: an architecture nobody serves is refused naming
// the file, the field it came from and the value.
func TestBuildUnsupported(t *testing.T) {
	for _, tc := range []struct {
		format model.Format
		field  string
	}{
		{model.FormatGGUF, "general.architecture"},
		{model.FormatHF, "config.json architectures"},
	} {
		ck := &model.Checkpoint{Path: "/models/x", Format: tc.format, Config: model.Config{Architecture: "qwen3next"}}
		_, err := Build(ck, nil)
		if err == nil || !strings.Contains(err.Error(), "/models/x: "+tc.field+`: architecture "qwen3next" is not supported`) {
			t.Errorf("%s: err = %v", tc.format, err)
		}
	}
}
