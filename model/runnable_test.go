package model

import (
	"strings"
	"testing"
)

func TestCheckInputIDs(t *testing.T) {
	if err := CheckInputIDs([]int32{0, 5, 9}, 10); err != nil {
		t.Fatalf("valid ids refused: %v", err)
	}
	for _, bad := range [][]int32{{1, 10}, {-1}, {3, 4, 1 << 20}} {
		err := CheckInputIDs(bad, 10)
		if err == nil || !strings.Contains(err.Error(), "outside the vocabulary [0, 10)") {
			t.Errorf("%v: err = %v", bad, err)
		}
	}
}
