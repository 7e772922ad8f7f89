package policy

import (
	"errors"
	"slices"
	"testing"
)

// TestCandidates: the served model goes to the members not draining (all
// when all drain), an adapter to its own members likewise, an unknown
// model nowhere.
func TestCandidates(t *testing.T) {
	var r registry
	tb, joined := newTable(Config{
		Model:     "base",
		Instances: []Instance{{ID: "a"}, {ID: "b", Draining: true}, {ID: "c"}},
		Adapters:  map[string][]string{"lora": {"b", "c", "gone"}, "drained": {"b"}},
	}, &r)
	if len(joined) != 3 {
		t.Fatalf("%d new counters, want 3", len(joined))
	}
	for _, tc := range []struct {
		model string
		want  []int
		err   error
	}{
		{"", []int{0, 2}, nil},
		{"base", []int{0, 2}, nil},
		{"lora", []int{2}, nil},
		{"drained", []int{1}, nil},
		{"other", nil, ErrUnknownModel},
	} {
		got, err := tb.Candidates(tc.model)
		if !errors.Is(err, tc.err) || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v %v", tc.model, got, err, tc.want, tc.err)
		}
	}
	if again, joined := newTable(Config{Instances: []Instance{{ID: "a"}}}, &r); len(joined) != 0 || again.Members[0].Stat != tb.Members[0].Stat {
		t.Fatal("a known instance got new counters")
	}
}

// TestChoiceChargesUntilDone: a choice counts in flight and its prefill
// on its instance, moves both on Next, drops the prefill at the first
// token and everything at Done, once.
func TestChoiceChargesUntilDone(t *testing.T) {
	var r registry
	tb, _ := newTable(Config{Instances: []Instance{{ID: "a"}, {ID: "b"}}}, &r)
	a, b := tb.Members[0].Stat, tb.Members[1].Stat
	c := newChoice(tb, []int{0, 1}, unrankedTail{}, 100, 40, false, Decision{})
	if a.InFlight.Load() != 1 || a.Prefill.Load() != 40 {
		t.Fatalf("charged %d, %d; want 1, 40", a.InFlight.Load(), a.Prefill.Load())
	}
	if !c.Next() || a.InFlight.Load() != 0 || b.InFlight.Load() != 1 || b.Prefill.Load() != 100 {
		t.Fatal("Next did not move the charge, the whole prompt, to the next instance")
	}
	c.Prefilled()
	if b.Prefill.Load() != 0 || b.InFlight.Load() != 1 {
		t.Fatal("Prefilled did not release the prefill alone")
	}
	c.Done()
	c.Done()
	if b.InFlight.Load() != 0 || c.Next() {
		t.Fatal("Done twice released twice, or Next went on after Done")
	}
}
