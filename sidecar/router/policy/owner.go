package policy

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/warmroute/warmroute/api/hrw"
)

// One decider per instance. Router replicas that each decide from their
// own counts plus their peers' reports, a report old, disagree at the
// threshold and split its headroom into slices (see overThreshold); on
// saturated traffic that cost several points of hit rate against one
// router. So every instance has an owner among the replicas that take
// forwarded requests (see assignOwners), and a replica that places a
// request on an instance it does not own forwards it, body unchanged, to
// the owner, which decides as a lone router would: it sees every request
// placed on its instances live, and peers' reports only for the spills
// other owners send there. Owners derive from the instances' ids and the
// replicas' names only, so every replica that sees the same peers
// computes the same owners.

// owners is this replica's forwarding address and its peers', from their
// reports.
type owners struct {
	mu     sync.Mutex
	self   string
	addr   string            // "" while this replica takes no forwarded requests
	byName map[string]string // peer replica → its forwarding address
	of     map[string]string // instance id → its owner, while forwarding
}

// SetForward names this replica and the address its peers forward
// requests to ("" to take none, as while it drains); it goes out in every
// report from now on.
func (p *Policy) SetForward(self, addr string) {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	p.owners.self, p.owners.addr = self, addr
	p.updateOwning()
}

// Owner returns the replica that decides for the instance with the given
// id and the address to forward to, or "" and "" when this replica
// decides: it owns the instance, takes no forwarded requests itself, knows
// no peer that does, or the instance is not in its routing document yet.
func (p *Policy) Owner(instance string) (replica, addr string) {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	best := p.owners.of[instance]
	if best == "" || best == p.owners.self {
		return "", ""
	}
	return best, p.owners.byName[best]
}

// assignOwners gives every instance one owner among replicas, as evenly
// as the numbers allow: each replica owns ⌊N/R⌋ or ⌈N/R⌉ of the N
// instances. The (instance, replica) pairs are taken in descending
// rendezvous score, each instance going to the first replica of its order
// that still has room, where room is ⌊N/R⌋ instances, and one more for the
// first N mod R replicas to reach ⌊N/R⌋. Plain rendezvous hashing (every
// instance to the top of its order) moves the fewest instances when a
// replica comes or goes, but with few instances it is uneven: with 7
// instances and 2 replicas one replica owns 5 or more 45 % of the time,
// and with 4 and 2 all four one time in eight, and that replica then
// decides and proxies most of the traffic while the other only relays.
// Capped, a change of replicas also moves some instances between replicas
// that stayed, which costs nothing in cache (placement does not depend on
// owners) and only moves which replica decides. The order is total
// (ties by names), so the result depends on the sets alone.
func assignOwners(ids, replicas []string) map[string]string {
	replicas = slices.Compact(slices.Sorted(slices.Values(replicas)))
	if len(ids) == 0 || len(replicas) == 0 {
		return nil
	}
	type pair struct {
		score     uint64
		inst, rep int
	}
	pairs := make([]pair, 0, len(ids)*len(replicas))
	for i, id := range ids {
		for j, r := range replicas {
			pairs = append(pairs, pair{ownerScore(r, id), i, j})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(ids[a.inst], ids[b.inst]), cmp.Compare(a.rep, b.rep))
	})
	floor, extra := len(ids)/len(replicas), len(ids)%len(replicas)
	owned := make([]int, len(replicas))
	out := make(map[string]string, len(ids))
	for _, pr := range pairs {
		id := ids[pr.inst]
		if _, done := out[id]; done {
			continue
		}
		switch n := owned[pr.rep]; {
		case n < floor:
		case n == floor && extra > 0:
			extra--
		default:
			continue // full
		}
		owned[pr.rep]++
		out[id] = replicas[pr.rep]
	}
	return out
}

// ownerScore is the replica's rendezvous score for the instance: the
// project's rendezvous mixing (api/hrw) of the two names' hashes.
func ownerScore(replica, instance string) uint64 {
	return hrw.Mix64(hashString(0, replica) ^ hashString(0, instance))
}

// forwardAddr is what this replica's reports carry.
func (p *Policy) forwardAddr() string {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	return p.owners.addr
}

// notePeerForward records a peer's forwarding address ("" removes it).
func (p *Policy) notePeerForward(replica, addr string) {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	if p.owners.byName == nil {
		p.owners.byName = make(map[string]string)
	}
	if p.owners.byName[replica] == addr {
		return // every report carries it: nothing changed
	}
	if addr == "" {
		delete(p.owners.byName, replica)
	} else {
		p.owners.byName[replica] = addr
	}
	p.updateOwning()
}

// updateOwning sets owning (requests are forwarded to owners) and which
// instances this replica owns. The caller holds p.owners.mu, under which
// it changed what these derive from.
func (p *Policy) updateOwning() {
	o := &p.owners
	owning := o.addr != "" && len(o.byName) > 0
	o.of = nil
	if t := p.table.Load(); owning && t != nil {
		// The routing document's instances, not the registry's: it may
		// still hold a removed instance with requests in flight, which
		// replicas that never had it would not count.
		ids := make([]string, len(t.members))
		for i, m := range t.members {
			ids[i] = m.ID
		}
		o.of = assignOwners(ids, append(slices.Collect(maps.Keys(o.byName)), o.self))
	}
	p.owning.Store(owning)
	p.stats.each(func(id string, s *stat) {
		s.owned.Store(owning && o.of[id] == o.self)
	})
}

// decidersOf is how many replicas decide for the instance: 1 when this
// replica owns it (every request placed there is forwarded here), else
// every replica. An instance this replica does not own still receives its
// decisions when it spills a request there from one of its own (or
// decides a request its owner could not be reached for), and so do the
// other owners': counting itself the only decider there, as every owner
// did at first, let three owners spilling a hot prefix onto the same next
// instance take it to 15 with a threshold of 10 (benchmark, hot-prefix, 3
// replicas), so there it keeps to its part of the headroom, as replicas
// that do not forward do (see overThreshold).
func (p *Policy) decidersOf(s *stat) int64 {
	if s.owned.Load() {
		return 1
	}
	return p.replicas.Load()
}

// StopOwning takes this replica out of the owners, as it drains: its
// reports from now on carry no address, so its peers stop forwarding to it
// within a report interval, and it forwards nothing itself.
func (p *Policy) StopOwning() {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	p.owners.addr = ""
	p.updateOwning()
}

// Forwarding reports whether requests go to their instance's owner (this
// replica takes forwarded requests and knows a peer that does).
func (p *Policy) Forwarding() bool { return p.owning.Load() }

// ForwardAddr is where the peer named replica takes forwarded requests
// ("" when it takes none, or is this replica): the address of the owner
// that Peek names, without ranking the replicas again.
func (p *Policy) ForwardAddr(replica string) string {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	if replica == p.owners.self || p.owners.addr == "" {
		return ""
	}
	return p.owners.byName[replica]
}
