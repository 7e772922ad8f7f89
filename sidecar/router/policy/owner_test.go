package policy

import (
	"fmt"
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
