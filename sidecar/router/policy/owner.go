package policy

import (
	"sync"

	"github.com/warmroute/warmroute/api/hrw"
)

// One decider per instance. Router replicas that each decide from their
// own counts plus their peers' reports, a report old, disagree at the
// threshold and split its headroom into slices (see overThreshold); on
// saturated traffic that cost several points of hit rate against one
// router. So every instance has an owner, the replica first in rendezvous
// (HRW) order of the instance's id over the replicas that take forwarded
// requests, and a replica that places a request on an instance it does not
// own forwards it, body unchanged, to the owner, which decides as a lone
// router would: it sees every request placed on its instances live, and
// peers' reports only for the spills other owners send there. HRW over the
// replicas' names moves only a leaving replica's instances, and every
// replica that sees the same peers computes the same owners.

// owners is this replica's forwarding address and its peers', from their
// reports.
type owners struct {
	mu     sync.Mutex
	self   string
	addr   string            // "" while this replica takes no forwarded requests
	byName map[string]string // peer replica → its forwarding address
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
// decides: it owns the instance, takes no forwarded requests itself, or
// knows no peer that does.
func (p *Policy) Owner(instance string) (replica, addr string) {
	p.owners.mu.Lock()
	defer p.owners.mu.Unlock()
	best := p.ownerLocked(instance)
	if best == "" || best == p.owners.self {
		return "", ""
	}
	return best, p.owners.byName[best]
}

// ownerLocked is the instance's owner, "" when requests are not forwarded
// (see Owner); the caller holds p.owners.mu.
func (p *Policy) ownerLocked(instance string) string {
	o := &p.owners
	if o.addr == "" || len(o.byName) == 0 {
		return ""
	}
	best, bestScore := o.self, ownerScore(o.self, instance)
	for name := range o.byName {
		if s := ownerScore(name, instance); s > bestScore || s == bestScore && name < best {
			best, bestScore = name, s
		}
	}
	return best
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
	owning := p.owners.addr != "" && len(p.owners.byName) > 0
	p.owning.Store(owning)
	p.stats.each(func(id string, s *stat) {
		s.owned.Store(owning && p.ownerLocked(id) == p.owners.self)
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
