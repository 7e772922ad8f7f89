package policy

import (
	"fmt"
	"slices"
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
// name the same owner for every instance, and a replica that leaves takes
// only its own instances along.
func TestOwnersAgreeAndMoveLittle(t *testing.T) {
	names := []string{"router-a", "router-b", "router-c"}
	ps := make([]*Policy, len(names))
	for i, n := range names {
		ps[i] = New(Tuning{})
		if ps[i].Forwarding() {
			t.Fatal("forwarding before any peer is known")
		}
		ps[i].SetForward(n, "10.0.0."+fmt.Sprint(i+1)+":8080")
	}
	for i, p := range ps {
		for j, q := range ps {
			if i != j {
				r := q.LocalReport(names[i], 0)
				r.Replica = names[j]
				p.ApplyPeer(r)
			}
		}
		if !p.Forwarding() {
			t.Fatalf("%s: not forwarding with two peers", names[i])
		}
	}
	before := map[string]string{}
	count := map[string]int{}
	for k := range 300 {
		id := fmt.Sprintf("vllm-%d", k)
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
		if count[n] < 60 {
			t.Errorf("%s owns %d of 300 instances: %v", n, count[n], count)
		}
	}
	// router-c leaves (its reports stop, or it drains).
	ps[0].ForgetPeer("router-c")
	ps[1].ForgetPeer("router-c")
	for id, o := range before {
		got := ownerOf(ps[0], names[0], id)
		if o != "router-c" && got != o {
			t.Errorf("%s moved from %s to %s though %s stayed", id, o, got, o)
		}
		if got == "router-c" {
			t.Errorf("%s still owned by the replica that left", id)
		}
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

// TestOwnerKeepsToItsSliceElsewhere: an owner decides alone for its own
// instances, so it may fill one to the threshold; on an instance another
// replica owns (where it sends spills) it is one of R deciders and keeps to
// its part of the headroom, beyond what its peers know of.
func TestOwnerKeepsToItsSliceElsewhere(t *testing.T) {
	names := []string{"router-a", "router-b", "router-c"}
	ps := make([]*Policy, len(names))
	for i, n := range names {
		ps[i] = newPolicy(t, PrefixAware, 7, Tuning{})
		ps[i].SetReplicas(len(names))
		ps[i].SetForward(n, fmt.Sprintf("10.0.0.%d:8080", i+1))
	}
	for i, p := range ps {
		for j, q := range ps {
			if i != j {
				r := q.LocalReport("", 0)
				r.Replica = names[j]
				p.ApplyPeer(r)
			}
		}
	}
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
