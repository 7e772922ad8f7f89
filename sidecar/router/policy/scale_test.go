package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
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
	if err := p.Update(Config{Strategy: PrefixAware, Model: "m", HashSeed: 42, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: fleet(n)}); err != nil {
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

// TestRestoredReplicaSeesTheNewcomerAsItsPeer: a replica that restarted
// while the fleet grew restores a peer's snapshot that does not know the
// new instance yet, and must then place as the peer does once the peer
// sees the new instance, not take it for an empty instance to fill.
func TestRestoredReplicaSeesTheNewcomerAsItsPeer(t *testing.T) {
	reqs := scaleStream(700, 3)
	peer := newPolicy(t, PrefixAware, 7, Tuning{DecayEvery: 1 << 20})
	routeAll(t, peer, reqs)
	fresh := New(Tuning{DecayEvery: 1 << 20})
	grow(t, fresh, 8)
	if err := fresh.Restore(peer.Snapshot()); err != nil {
		t.Fatal(err)
	}
	grow(t, peer, 8)
	a, b := routeAll(t, peer, reqs), routeAll(t, fresh, reqs)
	differ := 0
	for i := range a {
		if a[i] != b[i] {
			differ++
		}
	}
	if differ > 0 {
		t.Fatalf("the restored replica placed %d of %d requests elsewhere than its peer", differ, len(reqs))
	}
}

// TestScaleOutWithReplicasMovesLittleBetweenSurvivors follows the e2e
// suite's scale spec in process: two replicas behind a spreader that
// alternates them per round, conversations behind a shared 6,000-character
// system prompt, reports crossing about every 10 decisions, 4 → 5
// instances. It counts the (conversation, replica) pairs whose instance
// changed between two instances that were both there before: keys that
// share balance moved after the newcomer took its fifth. Each old instance
// loses a random fifth of its keys, which can leave one over move-slack,
// and it sheds keys until its share, a count of past decisions, shows the
// relief: more than needed. Over 300 seeds, the worst seed moved 4.2 % of
// the pairs with 240 conversations (7 seeds over 2 %), 2.7 % with 480 (1
// seed), 0.9 % with 960 (none), which the e2e spec now runs.
func TestScaleOutWithReplicasMovesLittleBetweenSurvivors(t *testing.T) {
	const seeds, groups = 40, 960
	var worst float64
	for seed := uint64(1); seed <= seeds; seed++ {
		worst = max(worst, scaleWithReplicas(t, seed, groups))
	}
	t.Logf("4→5 with 2 replicas and %d conversations, %d seeds: at most %.2f %% of pairs moved between survivors", groups, seeds, 100*worst)
	if worst > 0.02 {
		t.Errorf("%.2f %% of pairs moved between survivors in one seed, want at most 2 %%", 100*worst)
	}
}

// scaleWithReplicas runs one seed of the test above and returns the
// fraction of pairs moved between survivors.
func scaleWithReplicas(t *testing.T, seed uint64, groups int) float64 {
	t.Helper()
	system := strings.Repeat("support policy clause: customers may ask about orders, returns and warranties. ", 80)[:6000]
	rng := rand.New(rand.NewPCG(seed, 7))
	names := []string{"router-0", "router-1"}
	config := func(n int) Config {
		return Config{Strategy: PrefixAware, Model: "m", HashSeed: seed, PrefixLength: 16384, ConcurrencyThreshold: 64, Instances: fleet(n)}
	}
	ps := make([]*Policy, len(names))
	for i := range ps {
		ps[i] = New(Tuning{})
		if err := ps[i].Update(config(4)); err != nil {
			t.Fatal(err)
		}
		ps[i].SetReplicas(len(names))
	}
	seen := map[[2]int]uint64{}
	exchange := func() { pullAll(ps, names, seen) }
	last := map[[2]int]string{}
	var inFlight []*Choice
	n := 0
	rounds := func(k int) {
		for range k {
			for g := range groups {
				n++
				via := (g + n/groups) % len(ps)
				text := system + fmt.Sprintf("Conversation %d: my parcel has not arrived, here is everything I know about it. ", g)
				c := pick(t, ps[via], Request{Text: []byte(text), WindowBytes: len(text)})
				last[[2]int{g, via}] = c.Instance().ID
				if inFlight = append(inFlight, c); len(inFlight) > 8 {
					inFlight[0].Done()
					inFlight = inFlight[1:]
				}
				if rng.IntN(10) == 0 {
					exchange()
				}
			}
		}
	}
	rounds(6)
	before := maps.Clone(last)
	for _, p := range ps {
		if err := p.Update(config(5)); err != nil {
			t.Fatal(err)
		}
	}
	exchange()
	rounds(4)
	between := 0
	for k, from := range before {
		if to := last[k]; to != from && to != "vllm-4" {
			between++
		}
	}
	return float64(between) / float64(len(before))
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
