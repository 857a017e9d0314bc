package device

import (
	"strings"
	"testing"
)

func TestGraphBatchSizes(t *testing.T) {
	got := GraphBatchSizes(40)
	want := []int{1, 2, 4, 8, 16, 24, 32, 40}
	if len(got) != len(want) {
		t.Fatalf("GraphBatchSizes(40) = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("GraphBatchSizes(40) = %v, want %v", got, want)
		}
	}
	if got := GraphBatchSizes(3); len(got) != 3 || got[2] != 3 {
		t.Errorf("GraphBatchSizes(3) = %v, want [1 2 3]", got)
	}
	if got := GraphBatchSizes(0); len(got) != 0 {
		t.Errorf("GraphBatchSizes(0) = %v", got)
	}
	big := GraphBatchSizes(512)
	if big[len(big)-1] != 512 || big[len(big)-2] != 496 {
		t.Errorf("tail of GraphBatchSizes(512) = %v", big[len(big)-3:])
	}
	for _, tc := range []struct{ n, want int }{{1, 1}, {3, 4}, {9, 16}, {40, 40}} {
		if got, ok := PaddedBatchSize(tc.n, want); !ok || got != tc.want {
			t.Errorf("PaddedBatchSize(%d) = %d, %v", tc.n, got, ok)
		}
	}
	if _, ok := PaddedBatchSize(41, want); ok {
		t.Error("41 fits no captured size")
	}
}

// TestRegisterOpen: Open finds what Register added, refuses a name nobody
// registered with the sentence a user reads, and a second Register of a
// name panics.
func TestRegisterOpen(t *testing.T) {
	if _, err := Open("tpu-test", OpenOptions{}); err == nil || !strings.Contains(err.Error(), "no tpu-test device") {
		t.Fatalf("Open of an unregistered device: %v", err)
	}
	var got OpenOptions
	Register("tpu-test", func(o OpenOptions) (Runtime, error) { got = o; return nil, nil })
	if _, err := Open("tpu-test", OpenOptions{WeightDType: 3}); err != nil || got.WeightDType != 3 {
		t.Fatalf("Open: %v, options %+v", err, got)
	}
	if !strings.Contains(strings.Join(Registered(), ","), "tpu-test") {
		t.Errorf("Registered() = %v", Registered())
	}
	defer func() {
		if recover() == nil {
			t.Error("a second Register of one name must panic")
		}
	}()
	Register("tpu-test", nil)
}

// TestCombineVotes: a group replays only a graph every rank matched, and
// runs eagerly (or holds) when any rank must.
func TestCombineVotes(t *testing.T) {
	for _, tc := range []struct {
		votes []GraphVote
		want  GraphVote
	}{
		{[]GraphVote{{Graph: 3}, {Graph: 3}, {Graph: 3}}, GraphVote{Graph: 3}},
		{[]GraphVote{{Graph: 3}, {Graph: 3}, {Graph: 2}}, GraphVote{}},
		{[]GraphVote{{Graph: 3}, {}, {Graph: 3}}, GraphVote{}},
		{[]GraphVote{{Graph: 3}, {Graph: 3, Eager: true}}, GraphVote{Graph: 3, Eager: true}},
		{[]GraphVote{{}, {Eager: true, Hold: true}, {}}, GraphVote{Eager: true, Hold: true}},
	} {
		got := tc.votes[0]
		for _, v := range tc.votes[1:] {
			got = CombineVotes(got, v)
		}
		if got != tc.want {
			t.Errorf("%+v combine to %+v, want %+v", tc.votes, got, tc.want)
		}
	}
}
