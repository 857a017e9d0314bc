package cuda

import "testing"

// TestRecorderSignature: the signature changes with any operation's kind,
// order or argument, is reproducible, and only a dry run skips work.
func TestRecorderSignature(t *testing.T) {
	sign := func(mode recordMode, ops [][]uint64) (uint64, []bool) {
		var r recorder
		r.begin(mode)
		var skips []bool
		for _, op := range ops {
			skips = append(skips, r.record(op[0], op[1:]...))
		}
		sig, n, err := r.end()
		if err != nil || n != len(ops) {
			t.Fatalf("end: %d ops, err %v", n, err)
		}
		return sig, skips
	}
	base := [][]uint64{{opLaunch, 7, 1, 2}, {opMatmul, 3, 4}, {opCopyHtoD, 0x1000, 0x2000, 64, 1}}
	s1, skips := sign(recordDry, base)
	if s2, _ := sign(recordDry, base); s2 != s1 {
		t.Fatal("the same operations gave two signatures")
	}
	for _, s := range skips {
		if !s {
			t.Fatal("a dry run must skip every operation")
		}
	}
	if s3, skips := sign(recordCapture, base); s3 != s1 || skips[0] {
		t.Fatal("a capture must sign like a dry run and enqueue")
	}
	variants := [][][]uint64{
		{{opLaunch, 7, 1, 3}, {opMatmul, 3, 4}, {opCopyHtoD, 0x1000, 0x2000, 64, 1}},    // an argument
		{{opMatmul, 3, 4}, {opLaunch, 7, 1, 2}, {opCopyHtoD, 0x1000, 0x2000, 64, 1}},    // the order
		{{opLaunch, 7, 1, 2}, {opMatmul, 3, 4}, {opCopyDtoD, 0x1000, 0x2000, 64, 1}},    // a kind
		{{opLaunch, 7, 1, 2}, {opMatmul, 3, 4}},                                         // one fewer
		{{opLaunch, 7, 1, 2}, {opMatmul, 3, 4, 0}, {opCopyHtoD, 0x1000, 0x2000, 64, 1}}, // an extra word
	}
	for i, v := range variants {
		if s, _ := sign(recordDry, v); s == s1 {
			t.Errorf("variant %d has the base signature", i)
		}
	}
	var off recorder
	if off.record(opLaunch, 1) || off.ops != 0 {
		t.Fatal("with recording off nothing is skipped or counted")
	}
	var r recorder
	r.begin(recordDry)
	r.refuse("a device-to-host copy")
	r.refuse("an event record")
	if _, _, err := r.end(); err == nil || err.Error() != "a device-to-host copy" {
		t.Fatalf("refusal: %v, want the first reason", err)
	}
}

// TestStagingRewindReusesAddresses: a rewound staging hands the same
// uploads the same pinned memory, which is what a replayed graph's copies
// read.
func TestStagingRewindReusesAddresses(t *testing.T) {
	fake := newFakeStaging()
	s := staging{be: fake}
	var first []*byte
	for round := range 3 {
		s.rewind()
		for i, n := range []int{100, 70000, 12, 300000} {
			b, err := s.take(n)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				first = append(first, &b[0])
			} else if &b[0] != first[i] {
				t.Fatalf("round %d upload %d moved", round, i)
			}
		}
	}
}
