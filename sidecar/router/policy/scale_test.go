package policy

import (
	"math/rand/v2"
	"testing"
)

// scaleStream is a running fleet's traffic: distinct prompts, each sent
// several times in a shuffled order, so that most requests find their key
// in the prefix index.
func scaleStream(keys, repeats int) []Request {
	r := rand.New(rand.NewPCG(3, 4))
	texts := make([]string, keys)
	for i := range texts {
		texts[i] = randomText(r, 600)
	}
	var out []Request
	for range repeats {
		for _, i := range r.Perm(keys) {
			out = append(out, textReq(texts[i]))
		}
	}
	return out
}

// routeAll routes reqs in order, each released before the next, and
// returns the instances chosen.
func routeAll(t *testing.T, p *Policy, reqs []Request) []string {
	t.Helper()
	out := make([]string, len(reqs))
	for i, r := range reqs {
		c := pick(t, p, r)
		out[i] = c.Instance().ID
		c.Done()
	}
	return out
}

func grow(t *testing.T, p *Policy, n int) {
	t.Helper()
	if err := p.Update(Config{Strategy: PrefixAware, Model: "m", HashSeed: 42, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: instancesOf(n)}); err != nil {
		t.Fatal(err)
	}
}

// TestScaleOutMovesOnlyTheNewcomersKeys adds an instance to a running
// router and replays its traffic: the keys that move go to the new
// instance, about 1/8 of them (the keys plain rendezvous hashing moves),
// and the new instance gets about its fair part of the requests. A
// newcomer that started at a zero share took every key with it among its
// first two choices while it caught up with counts of past decisions: a
// quarter of the keys.
func TestScaleOutMovesOnlyTheNewcomersKeys(t *testing.T) {
	reqs := scaleStream(1400, 4)
	warm := func() *Policy {
		p := newPolicy(t, PrefixAware, 7, Tuning{DecayEvery: 1 << 20})
		routeAll(t, p, reqs)
		return p
	}
	same, scaled := warm(), warm()
	grow(t, scaled, 8)
	before, after := routeAll(t, same, reqs), routeAll(t, scaled, reqs)
	moved, between, newcomer := 0, 0, 0
	for i := range reqs {
		if after[i] == "vllm-7" {
			newcomer++
		}
		if after[i] != before[i] {
			moved++
			if after[i] != "vllm-7" {
				between++
			}
		}
	}
	n := float64(len(reqs))
	t.Logf("7→8: %.2f%% of requests moved, %.2f%% between survivors; the new instance took %.2f of its fair part",
		100*float64(moved)/n, 100*float64(between)/n, float64(newcomer)/n*8)
	if f := float64(moved) / n; f > 1.0/8+0.03 {
		t.Errorf("moved %.3f of requests, want at most 1/8 + 0.03", f)
	}
	if f := float64(between) / n; f > 0.01 {
		t.Errorf("%.3f of requests moved between instances that were there before, want at most 0.01", f)
	}
	if f := float64(newcomer) / n * 8; f < 0.7 {
		t.Errorf("the new instance took %.2f of its fair part, want at least 0.7", f)
	}
}

// TestSuccessorSeesTheNewcomerAsItsLeader: a picker that takes over
// restores the old leader's snapshot, which does not know an instance
// that joined meanwhile, and must then place as the old leader would have
// once it saw the new instance, not take it for an empty instance to fill.
func TestSuccessorSeesTheNewcomerAsItsLeader(t *testing.T) {
	reqs := scaleStream(700, 3)
	leader := newPolicy(t, PrefixAware, 7, Tuning{DecayEvery: 1 << 20})
	routeAll(t, leader, reqs)
	successor := New(Tuning{DecayEvery: 1 << 20})
	grow(t, successor, 8)
	if err := successor.Restore(leader.Snapshot()); err != nil {
		t.Fatal(err)
	}
	grow(t, leader, 8)
	a, b := routeAll(t, leader, reqs), routeAll(t, successor, reqs)
	differ := 0
	for i := range a {
		if a[i] != b[i] {
			differ++
		}
	}
	if differ > 0 {
		t.Fatalf("the successor placed %d of %d requests elsewhere than the old leader", differ, len(reqs))
	}
}

// TestKeyMovesSayWhy: a key the index knew that goes to a newcomer whose
// first choice it is moves as "joining", and back to the instance it came
// from when that newcomer leaves again as "holder_left"; a key that stays
// does not count as moved.
func TestKeyMovesSayWhy(t *testing.T) {
	reqs := scaleStream(700, 2)
	p := newPolicy(t, PrefixAware, 7, Tuning{DecayEvery: 1 << 20})
	routeAll(t, p, reqs)
	moves := func() map[string]map[string]int {
		out := map[string]map[string]int{}
		for _, r := range reqs {
			c := pick(t, p, r)
			if out[c.Moved] == nil {
				out[c.Moved] = map[string]int{}
			}
			out[c.Moved][c.Instance().ID]++
			c.Done()
		}
		return out
	}
	grow(t, p, 8)
	out := moves()
	t.Logf("7→8: moved by reason and instance: %v", out)
	if len(out[MoveJoining]) != 1 || out[MoveJoining]["vllm-7"] == 0 {
		t.Errorf("7→8: joining moves went to %v, want only the newcomer vllm-7", out[MoveJoining])
	}
	if n := len(out[MoveHolderLeft]); n != 0 {
		t.Errorf("7→8: %d instances took keys whose holder left, want none", n)
	}
	grow(t, p, 7)
	out = moves()
	t.Logf("8→7: moved by reason and instance: %v", out)
	if out[MoveHolderLeft]["vllm-7"] != 0 || len(out[MoveHolderLeft]) == 0 {
		t.Errorf("8→7: holder_left moves went to %v, want the instances the newcomer's keys came from", out[MoveHolderLeft])
	}
}
