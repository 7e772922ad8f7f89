package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

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
			s := p.stats.Get("vllm-7")
			s.WarmInFlight.Store(tc.inFlight)
			s.WarmTokens.Store(tc.spent)
			// The first request the joining rule applies to.
			var c *Choice
			var r Request
			for _, r = range reqs {
				if c = pick(t, p, r); c.Moved == MoveJoining || c.Warm != nil {
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
				if s.WarmInFlight.Load() != 1 || s.WarmTokens.Load() != tokens || tokens <= 0 {
					t.Fatalf("newcomer charged %d in flight, %d tokens, want 1 and %d", s.WarmInFlight.Load(), s.WarmTokens.Load(), tokens)
				}
				c.Warmed(tc.ok)
				c.Warmed(tc.ok) // only the first counts
				if s.WarmInFlight.Load() != 0 {
					t.Fatalf("%d warm copies in flight after Warmed, want 0", s.WarmInFlight.Load())
				}
			} else if c.Instance().ID != "vllm-7" {
				t.Fatalf("without warming the key went to %s, want the newcomer cold", c.Instance().ID)
			}
			c.Done()
			next := pick(t, p, r)
			defer next.Done()
			moved := next.Moved
			if next.Warm != nil {
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

// drainFleet is a PREFIX_AWARE policy of 4 instances that has routed
// reqs, then vllm-1 marked draining (all draining when all is set); and
// the requests whose keys vllm-1 held.
func drainFleet(t *testing.T, tune Tuning, reqs []Request, all bool) (*Policy, []Request) {
	t.Helper()
	tune.DecayEvery = 1 << 20
	p := newPolicy(t, PrefixAware, 4, tune)
	var held []Request
	seen := map[string]bool{}
	for i, id := range routeAll(t, p, reqs) {
		if k := string(reqs[i].Text); id == "vllm-1" && !seen[k] {
			held, seen[k] = append(held, reqs[i]), true
		}
	}
	in := instancesOf(4)
	for i := range in {
		in[i].Draining = all || in[i].ID == "vllm-1"
	}
	if err := p.Update(Config{Strategy: PrefixAware, Model: "m", HashSeed: 42, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: in}); err != nil {
		t.Fatal(err)
	}
	if len(held) < 20 {
		t.Fatalf("vllm-1 held %d keys, want at least 20", len(held))
	}
	return p, held
}

// TestWarmDraining pins the draining rules row by row: a drainer takes
// no new keys, but a key it holds is served there and names the key's
// next owner (where it goes with warming off, the drainer as good as
// gone) as the warm target; once the copy is answered the key lives on
// the next owner. Each way a request leaves the drainer is a row.
func TestWarmDraining(t *testing.T) {
	reqs := scaleStream(200, 2)
	// cold is where each held key goes with warming off: its next owner.
	cold, held := drainFleet(t, Tuning{NoWarm: true}, reqs, false)
	next := map[string]string{}
	for _, r := range held {
		c := pick(t, cold, r)
		next[string(r.Text)] = c.Instance().ID
		if c.Instance().ID == "vllm-1" || c.Moved != MoveHolderLeft || c.Warm != nil {
			t.Fatalf("warming off, a drainer's key went to %s (moved %q), want its next owner cold (holder_left)", c.Instance().ID, c.Moved)
		}
		c.Done()
	}
	cases := []struct {
		rule string
		// set changes the policy once draining starts.
		set      func(p *Policy)
		ok       bool   // what the copy's answer says
		want     string // where the first held key's request goes: "drainer" or "next"
		warm     bool
		spill    string
		moved    string
		wantNext string // where its following request goes
	}{
		{rule: "a key the drainer holds stays there and warms its next owner", ok: true, want: "drainer", warm: true, wantNext: "next"},
		{rule: "the copy failed: its next request warms again", ok: false, want: "drainer", warm: true, wantNext: "drainer"},
		{rule: "the drainer is ejected: to the next owner cold", set: func(p *Policy) { p.Eject("vllm-1", time.Now().Add(time.Hour)) },
			want: "next", moved: MoveHolderLeft, wantNext: "next"},
		{rule: "the drainer is at the threshold: spilled to the next owner, no copy", set: func(p *Policy) { p.stats.Get("vllm-1").InFlight.Store(10) },
			want: "next", spill: SpillConcurrency, wantNext: "drainer"},
		{rule: "the next owner's copies in flight are full: to it cold", set: func(p *Policy) { eachServing(p, func(s *counters) { s.WarmInFlight.Store(warmInFlight) }) },
			want: "next", moved: MoveHolderLeft, wantNext: "next"},
		{rule: "the next owner's budget is spent: to it cold", set: func(p *Policy) { eachServing(p, func(s *counters) { s.WarmTokens.Store(warmBudget) }) },
			want: "next", moved: MoveHolderLeft, wantNext: "next"},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			p, held := drainFleet(t, Tuning{}, reqs, false)
			if tc.set != nil {
				tc.set(p)
			}
			r := held[0]
			owner := next[string(r.Text)]
			where := func(c *Choice) string {
				switch c.Instance().ID {
				case "vllm-1":
					return "drainer"
				case owner:
					return "next"
				}
				return c.Instance().ID
			}
			c := pick(t, p, r)
			in, tokens, warm := c.WarmTarget()
			if got := where(c); got != tc.want || warm != tc.warm || c.Spill != tc.spill || c.Moved != tc.moved {
				t.Fatalf("went to %s (spill %q, moved %q, warm %v), want %s (%q, %q, %v)", got, c.Spill, c.Moved, warm, tc.want, tc.spill, tc.moved, tc.warm)
			}
			if warm {
				if in.ID != owner || tokens <= 0 {
					t.Fatalf("warms %s with %d tokens, want the next owner %s", in.ID, tokens, owner)
				}
				c.Warmed(tc.ok)
			}
			c.Done()
			p.stats.Get("vllm-1").InFlight.Store(0)
			second := pick(t, p, r)
			defer second.Done()
			if got := where(second); got != tc.wantNext {
				t.Errorf("the key's next request went to %s (moved %q), want %s", got, second.Moved, tc.wantNext)
			}
			if tc.wantNext == "next" && (second.Moved != MoveNone || second.Warm != nil) {
				t.Errorf("the key's next request moved %q (warm %v), want it home on the next owner", second.Moved, second.Warm != nil)
			}
		})
	}
}

// eachServing sets every member's stat but vllm-1's.
func eachServing(p *Policy, f func(*counters)) {
	for _, m := range p.table.Load().Members {
		if m.ID != "vllm-1" {
			f(m.Stat)
		}
	}
}

// TestDrainerTakesNoNewKeys: a drainer is no candidate for new keys, nor
// for a spill or an all-busy overflow, under every strategy; its held keys
// warm their next owners within the budget, which a drain opens afresh;
// and a fleet that is all draining still serves.
func TestDrainerTakesNoNewKeys(t *testing.T) {
	reqs := scaleStream(200, 2)
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range testedStrategies {
		p := newPolicy(t, s, 4, Tuning{})
		in := instancesOf(4)
		in[1].Draining = true
		if err := p.Update(Config{Strategy: s, Model: "m", HashSeed: 42, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: in,
			Adapters: map[string][]string{"lora-a": {"vllm-1", "vllm-3"}}}); err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			c := pick(t, p, textReq(randomText(r, 300)))
			if c.Instance().ID == "vllm-1" {
				t.Fatalf("%s: new key %d went to the drainer", s, i)
			}
			if i%3 != 0 { // keep some in flight: spills and overflow
				defer c.Done()
			} else {
				c.Done()
			}
		}
		c, err := p.Pick(p.Key(Request{Model: "lora-a", Text: []byte("adapter"), WindowBytes: 7}))
		if err != nil || c.Instance().ID != "vllm-3" {
			t.Fatalf("%s: an adapter's request went to %v (%v), want vllm-3, the only one not draining", s, c, err)
		}
		c.Done()
	}

	p, held := drainFleet(t, Tuning{}, reqs, false)
	var warmed int
	for _, r := range held {
		c := pick(t, p, r)
		if _, _, ok := c.WarmTarget(); ok {
			warmed++
		}
		c.Done() // copies left in flight: the in-flight bound shows
	}
	if warmed == 0 || warmed > 3*warmInFlight {
		t.Errorf("%d of %d held keys warmed with copies left in flight, want some, at most %d per next owner", warmed, len(held), warmInFlight)
	}
	spent := p.stats.Get("vllm-0").WarmTokens.Load() + p.stats.Get("vllm-2").WarmTokens.Load() + p.stats.Get("vllm-3").WarmTokens.Load()
	if spent == 0 {
		t.Fatal("no warm tokens charged to the next owners")
	}
	// The drain ends; another starts: a new budget.
	grow(t, p, 3)
	in := instancesOf(3)
	in[0].Draining = true
	if err := p.Update(Config{Strategy: PrefixAware, Model: "m", HashSeed: 42, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: in}); err != nil {
		t.Fatal(err)
	}
	if spent := p.stats.Get("vllm-2").WarmTokens.Load(); spent != 0 {
		t.Errorf("a new drain left %d warm tokens charged, want a fresh budget", spent)
	}

	all, held := drainFleet(t, Tuning{}, reqs, true)
	c := pick(t, all, held[0])
	defer c.Done()
	if c.Instance().ID != "vllm-1" || c.Warm != nil {
		t.Errorf("all draining: the held key went to %s (warm %v), want served where it is, no copy", c.Instance().ID, c.Warm != nil)
	}
}
