package policy

import "testing"

// TestWarmJoining: a key the joining rule would move to a newcomer cold
// stays home and names the newcomer as its warm target, within the
// bounds; once the copy is answered the key lives on the newcomer, and its
// next request goes there without counting as a move. A failed copy
// records nothing; warming off, or past either bound, the key moves cold
// as before.
func TestWarmJoining(t *testing.T) {
	reqs := scaleStream(700, 2)
	cases := []struct {
		name string
		tune Tuning
		// inFlight and spent preload the newcomer's warm counters.
		inFlight, spent int64
		ok              bool // what the copy's answer says
		wantWarm        bool
		wantNext        string // where the key's next request goes, by its Moved
	}{
		{name: "warmed", ok: true, wantWarm: true, wantNext: MoveNone},
		{name: "copy failed", ok: false, wantWarm: true, wantNext: moveWarm},
		{name: "off", tune: Tuning{NoWarm: true}, wantNext: MoveJoining},
		{name: "in flight full", inFlight: warmInFlight, wantNext: MoveJoining},
		{name: "budget spent", spent: warmBudget, wantNext: MoveJoining},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.tune.DecayEvery = 1 << 20
			p := newPolicy(t, PrefixAware, 7, tc.tune)
			routeAll(t, p, reqs)
			grow(t, p, 8)
			s := p.stats.get("vllm-7")
			s.warmInFlight.Store(tc.inFlight)
			s.warmTokens.Store(tc.spent)
			// The first request the joining rule applies to.
			var c *Choice
			var r Request
			for _, r = range reqs {
				if c = pick(t, p, r); c.Moved == MoveJoining || c.warm != nil {
					break
				}
				c.Done()
			}
			in, tokens, warm := c.WarmTarget()
			if warm != tc.wantWarm {
				t.Fatalf("warm target %v, want %v (moved %q to %s)", warm, tc.wantWarm, c.Moved, c.Instance().ID)
			}
			if warm {
				if in.ID != "vllm-7" || c.Instance().ID == "vllm-7" || c.Moved != MoveNone {
					t.Fatalf("warming %s from %s (moved %q), want the newcomer warmed from home, no move", in.ID, c.Instance().ID, c.Moved)
				}
				if s.warmInFlight.Load() != 1 || s.warmTokens.Load() != tokens || tokens <= 0 {
					t.Fatalf("newcomer charged %d in flight, %d tokens, want 1 and %d", s.warmInFlight.Load(), s.warmTokens.Load(), tokens)
				}
				c.Warmed(tc.ok)
				c.Warmed(tc.ok) // only the first counts
				if s.warmInFlight.Load() != 0 {
					t.Fatalf("%d warm copies in flight after Warmed, want 0", s.warmInFlight.Load())
				}
			} else if c.Instance().ID != "vllm-7" {
				t.Fatalf("without warming the key went to %s, want the newcomer cold", c.Instance().ID)
			}
			c.Done()
			next := pick(t, p, r)
			defer next.Done()
			moved := next.Moved
			if next.warm != nil {
				moved = moveWarm
			}
			switch tc.wantNext {
			case MoveNone:
				if next.Instance().ID != "vllm-7" || moved != MoveNone {
					t.Errorf("next request went to %s (moved %q), want the newcomer, not moved", next.Instance().ID, moved)
				}
			case moveWarm:
				if moved != moveWarm {
					t.Errorf("next request moved %q, want warmed again", moved)
				}
			}
		})
	}
}
