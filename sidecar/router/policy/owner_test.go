package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ownerOf is the replica that decides for instance id as p sees it.
func ownerOf(p *Policy, self, id string) string {
	if o, _ := p.Owner(id); o != "" {
		return o
	}
	return self
}

// TestOwnersAgreeAndMoveLittle: replicas that hear each other's reports
// name the same owner for every instance, each owns a third of them, and
// a replica that leaves takes its own instances along and moves few others.
func TestOwnersAgreeAndMoveLittle(t *testing.T) {
	names := []string{"router-a", "router-b", "router-c"}
	ps := make([]*Policy, len(names))
	for i, n := range names {
		ps[i] = newPolicy(t, PrefixAware, 300, Tuning{})
		if ps[i].Forwarding() {
			t.Fatal("forwarding before any peer is known")
		}
		ps[i].SetForward(n, "10.0.0."+fmt.Sprint(i+1)+":8080")
	}
	exchangeAll(ps, names)
	for i, p := range ps {
		if !p.Forwarding() {
			t.Fatalf("%s: not forwarding with two peers", names[i])
		}
	}
	before := map[string]string{}
	count := map[string]int{}
	for _, in := range fleet(300) {
		id := in.ID
		o := ownerOf(ps[0], names[0], id)
		for i, p := range ps[1:] {
			if got := ownerOf(p, names[i+1], id); got != o {
				t.Fatalf("%s: %s names owner %s, %s names %s", id, names[i+1], got, names[0], o)
			}
		}
		if o != names[0] {
			if _, addr := ps[0].Owner(id); addr == "" {
				t.Fatalf("%s: owner %s without an address", id, o)
			}
		}
		before[id] = o
		count[o]++
	}
	for _, n := range names {
		if count[n] != 100 {
			t.Errorf("%s owns %d of 300 instances, want 100: %v", n, count[n], count)
		}
	}
	if _, addr := ps[0].Owner("vllm-unknown"); addr != "" {
		t.Error("an instance outside the routing document has an owner")
	}
	// router-c leaves (its reports stop, or it drains).
	ps[0].ForgetPeer("router-c")
	ps[1].ForgetPeer("router-c")
	moved := 0
	for id, o := range before {
		got := ownerOf(ps[0], names[0], id)
		if got != ownerOf(ps[1], names[1], id) {
			t.Errorf("%s: the two replicas left disagree", id)
		}
		if o != "router-c" && got != o {
			moved++
		}
		if got == "router-c" {
			t.Errorf("%s still owned by the replica that left", id)
		}
	}
	if moved > 10 {
		t.Errorf("%d of the 200 instances of the replicas that stayed moved between them, want few", moved)
	}
	// A draining replica advertises no address and forwards nothing.
	ps[1].StopOwning()
	if ps[1].Forwarding() || ps[1].LocalReport("", 0).Forward != "" {
		t.Fatal("a draining replica still takes forwarded requests")
	}
	r := ps[1].LocalReport("router-a", 0)
	r.Replica = "router-b"
	ps[0].ApplyPeer(r)
	if ps[0].Forwarding() {
		t.Fatal("router-a forwards to router-b, which drains")
	}
}

// TestOwnersAreEvenInSmallFleets: whatever the pod names, each of R
// replicas owns ⌊N/R⌋ or ⌈N/R⌉ of N instances (plain rendezvous hashing
// gave one of two replicas 5 or more of 7 instances 45 % of the time), and
// the owners do not depend on the order the replicas are listed in.
func TestOwnersAreEvenInSmallFleets(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{1, 2, 4, 7, 16} {
		for _, r := range []int{2, 3, 4} {
			for range 100 {
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("vllm-%x", rng.Uint64())
				}
				reps := make([]string, r)
				for i := range reps {
					reps[i] = fmt.Sprintf("router-%x", rng.Uint64())
				}
				got := assignOwners(ids, reps)
				count := map[string]int{}
				for _, id := range ids {
					if !slices.Contains(reps, got[id]) {
						t.Fatalf("%s owned by %q, not one of %v", id, got[id], reps)
					}
					count[got[id]]++
				}
				for _, rep := range reps {
					if c := count[rep]; c < n/r || c > (n+r-1)/r {
						t.Fatalf("%d instances, %d replicas: %s owns %d (%v)", n, r, rep, c, count)
					}
				}
				rng.Shuffle(len(reps), func(i, j int) { reps[i], reps[j] = reps[j], reps[i] })
				if again := assignOwners(ids, reps); !maps.Equal(again, got) {
					t.Fatalf("owners depend on the replicas' order: %v, then %v", got, again)
				}
			}
		}
	}
}

// owningReplicas is one policy per name over n instances, each taking
// forwarded requests and holding every other's report.
func owningReplicas(t *testing.T, names []string, n int) []*Policy {
	ps := make([]*Policy, len(names))
	for i, name := range names {
		ps[i] = newPolicy(t, PrefixAware, n, Tuning{})
		ps[i].SetReplicas(len(names))
		ps[i].SetForward(name, fmt.Sprintf("10.0.0.%d:8080", i+1))
	}
	exchangeAll(ps, names)
	return ps
}

// TestOwnerKeepsToItsSliceElsewhere: an owner decides alone for its own
// instances, so it may fill one to the threshold; on an instance another
// replica owns (where it sends spills) it is one of R deciders and keeps to
// its part of the headroom, beyond what its peers know of.
func TestOwnerKeepsToItsSliceElsewhere(t *testing.T) {
	names := []string{"router-a", "router-b", "router-c"}
	ps := owningReplicas(t, names, 7)
	// a is the owner of the first instance; other, one it does not own.
	tb := ps[0].table.Load()
	owner := ownerOf(ps[0], names[0], tb.members[0].ID)
	a := ps[slices.Index(names, owner)]
	tb = a.table.Load()
	own, other := 0, -1
	for m, mem := range tb.members {
		if ownerOf(a, owner, mem.ID) != owner {
			other = m
		}
	}
	if other < 0 {
		t.Fatalf("%s owns all 7 instances", owner)
	}
	fill := func(m int) int {
		s := tb.members[m].stat
		n := 0
		for ; !a.overThreshold(tb, m) && n < 20; n++ {
			s.inFlight.Add(1)
		}
		return n
	}
	if n := fill(own); n != 10 {
		t.Errorf("%s took %d requests on an instance it owns, want the threshold, 10", owner, n)
	}
	if n := fill(other); n != 4 {
		t.Errorf("%s took %d requests on an instance another replica owns, want its part ⌈10/3⌉ = 4", owner, n)
	}
}

// TestOwnerOverflowsWhileTheReportsShowRoom: an owner that sees every
// instance busy only because its part of the others' headroom is spent,
// while the peer's reports still show room there, sends the request to
// the least loaded instance once its own is at T + R − 1, rather than
// further past the threshold (it stayed home within overflowStay of the
// least: 8 in flight against a bound of 6 in the e2e suite); once the
// reports say every instance is full it stays home again, as a lone
// router does.
func TestOwnerOverflowsWhileTheReportsShowRoom(t *testing.T) {
	names := []string{"router-a", "router-b"}
	ps := owningReplicas(t, names, 4)
	a := ps[0]
	tb := a.table.Load()
	home := -1
	var req Request
	for i := 0; home < 0; i++ {
		if i == 1000 {
			t.Fatal("no request placed on an instance router-a owns")
		}
		req = textReq(fmt.Sprintf("Question %d about the delivery of parcels abroad.", i))
		pk, err := a.Peek(req)
		if err != nil {
			t.Fatal(err)
		}
		if pk.Owner == "" {
			home = slices.IndexFunc(tb.members, func(m member) bool { return m.ID == pk.Placed })
		}
	}
	// Every instance router-a owns is at T + R − 1 = 11 (it stayed home
	// once past the threshold of 10); on the others router-b reported 5
	// and router-a sent 3 its peer does not know of yet, its part
	// ⌈(10 − 5) / 2⌉ of their headroom. Home is within overflowStay of
	// the least loaded (8), where it used to stay.
	for _, m := range tb.members {
		s := m.stat
		if s.owned.Load() {
			s.inFlight.Store(11)
		} else {
			s.inFlight.Store(3)
			s.peerRequests.Store(5)
		}
	}
	pk, err := a.Peek(req)
	if err != nil {
		t.Fatal(err)
	}
	if pk.Instance == tb.members[home].ID || pk.Spill != SpillAllBusy {
		t.Fatalf("with room in the reports, the request went to %s (%s), want the least loaded, not home %s past the threshold", pk.Instance, pk.Spill, tb.members[home].ID)
	}
	// The reports now say every instance is full.
	for _, m := range tb.members {
		m.stat.pubRequests.Store(m.stat.inFlight.Load())
		if !m.stat.owned.Load() {
			m.stat.peerRequests.Store(7)
		}
	}
	if pk, _ := a.Peek(req); pk.Instance != tb.members[home].ID {
		t.Errorf("with every instance full in the reports, the request went to %s, want home %s", pk.Instance, tb.members[home].ID)
	}
}

// TestHotBurstStaysWithinTheOwnersBound replays bursts of one hot prefix
// (distinct questions after it, as the benchmark's hot-prefix workload)
// through replicas that forward to owners: each request enters a random
// replica, which forwards it to the owner its peek names, and the replicas
// exchange reports every few requests or not at all during the burst. An
// owner fills its instance live to T while the guests (replicas spilling
// there) each take their part ⌈T/R⌉ of the headroom its last report
// showed, so the bound with owners is the weaker T + (R − 1) × ⌈T/R⌉
// (sidecar/README.md): 15 with 2 replicas, 18 with 3, which a burst with
// no report exchanged reaches. Keeping guests to one request restored
// T + R − 1 here but took the e2e threshold spec past its bound through
// all-busy overflow (the addendum in docs/benchmarks.md).
func TestHotBurstStaysWithinTheOwnersBound(t *testing.T) {
	const threshold, burst = 10, 40
	all := []string{"router-a", "router-b", "router-c"}
	for _, replicas := range []int{2, 3} {
		for _, every := range []int{0, 5, 13} {
			names := all[:replicas]
			slice := (threshold + replicas - 1) / replicas
			bound, worst := int64(threshold+(replicas-1)*slice), int64(0)
			for seed := range 30 {
				worst = max(worst, hotBurstPeak(t, names, burst, every, uint64(seed)))
			}
			t.Logf("%d replicas, exchange every %d requests (0: none): most in flight on one instance %d, T + (R − 1) × ⌈T/R⌉ = %d", replicas, every, worst, bound)
			if worst > bound {
				t.Errorf("%d replicas, exchange every %d requests: an instance held %d requests, over T + (R − 1) × ⌈T/R⌉ = %d", replicas, every, worst, bound)
			}
		}
	}
}

// hotBurstPeak sends a burst of n requests sharing one hot prefix, each
// entering a random replica and forwarded to the owner its peek names,
// exchanging reports every every requests (0: never), and returns the
// most requests in flight on one instance from all replicas together.
func hotBurstPeak(t *testing.T, names []string, n, every int, seed uint64) int64 {
	ps := owningReplicas(t, names, 7)
	rng := rand.New(rand.NewPCG(seed, 1))
	prefix := strings.Repeat("A shared system prompt of the hot burst. ", 80) + fmt.Sprint(seed)
	for i := range n {
		req := textReq(fmt.Sprintf("%s question %d", prefix, i))
		p := ps[rng.IntN(len(ps))]
		if pk, err := p.Peek(req); err == nil && pk.Owner != "" {
			p = ps[slices.Index(names, pk.Owner)]
		}
		pick(t, p, req)
		if every > 0 && i%every == every-1 {
			exchangeAll(ps, names)
		}
	}
	var peak int64
	for _, in := range ps[0].Instances() {
		var on int64
		for _, p := range ps {
			on += p.InFlight(in.ID)
		}
		peak = max(peak, on)
	}
	return peak
}

// exchangeAll has every replica pull and apply every peer's whole report,
// and acknowledge it (see pullers).
func exchangeAll(ps []*Policy, names []string) { pullAll(ps, names, map[[2]int]uint64{}) }
