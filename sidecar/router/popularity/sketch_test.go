package popularity

import "testing"

// TestEstimateNeverUnderAndDecays: an estimate is at least the true
// count, halves every decayEvery requests, and a state moves to a sketch
// of the same width only.
func TestEstimateNeverUnderAndDecays(t *testing.T) {
	s := New(1<<10, 100)
	for i := range 99 {
		s.Record([]uint64{1, uint64(i + 10)})
	}
	if got := s.Estimate(1); got < 99 {
		t.Fatalf("estimate %d of a hash recorded 99 times", got)
	}
	s.Record([]uint64{1})
	if got, total := s.Estimate(1), s.Total(); got < 50 || got > 51 || total != 50 {
		t.Fatalf("after the 100th request: estimate %d, total %d; want halved (50, 50)", got, total)
	}
	other := New(1<<10, 100)
	if err := other.SetState(s.State()); err != nil || other.Estimate(1) != s.Estimate(1) {
		t.Fatalf("state of the same width: %v, estimate %d", err, other.Estimate(1))
	}
	if err := New(1<<11, 100).SetState(s.State()); err == nil {
		t.Fatal("took the state of another width")
	}
	bad := s.State()
	bad.Counts = bad.Counts[1:]
	if err := other.SetState(bad); err == nil {
		t.Fatal("took a state with a count missing")
	}
}
