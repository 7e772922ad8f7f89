package policy

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// Router replicas share one picture of load and placement by exchanging
// Reports (sidecar/router/peers pulls them over HTTP): each replica reports
// its own in-flight work and decayed shares per instance and the
// placements it made; each adds its peers' latest reports to its own
// counts, and inserts their placements into its prefix index, so that all
// replicas compare the same loads and shares and know where every key
// lives. A peer's report replaces its previous one (applying is
// idempotent); a peer that is gone is forgotten and the replica falls back
// to what it sees itself.

// peers holds the latest report of every peer.
type peers struct {
	mu     sync.Mutex
	byName map[string][]InstanceLoad
}

// SetReplicas sets how many router replicas share the fleet (self
// included), which divides the headroom under an instance's concurrency
// threshold between them (see overThreshold and overflowPool). n < 1
// counts as 1.
func (p *Policy) SetReplicas(n int) { p.replicas.Store(int64(max(n, 1))) }

// LongPrefills receives when this replica has sent an instance a request
// it expects to prefill at least TokenFloor tokens of, while peers' reports
// count in its picture; sends are coalesced, one pending at most. Peers
// learn of that prefill at their next pull, up to an interval later, and
// meanwhile send short requests to queue behind it, which they would not
// have done had they seen it: with two replicas in the benchmark's
// mixed-length workload, about half the short chats sent to an instance
// with more than 8,192 tokens left to prefill went there before the
// replica that sent the prefill had reported it. The transport asks the
// peers to pull at once (peers.Puller). Under TokenFloor the token rules
// never fire on a prefill alone, so shorter ones wait for the interval.
func (p *Policy) LongPrefills() <-chan struct{} { return p.longPrefill }

// noteLongPrefill signals LongPrefills for a prefill of tokens just
// charged.
func (p *Policy) noteLongPrefill(tokens int64) {
	if tokens < p.tuning.TokenFloor || !p.shared.Load() {
		return
	}
	select {
	case p.longPrefill <- struct{}{}:
	default:
	}
}

// LocalReport returns this replica's own loads and the placements it
// logged after since, for the peer named puller ("": not a peer, whose
// pulls are not remembered). The caller fills Replica and Epoch.
func (p *Policy) LocalReport(puller string, since uint64) Report {
	var loads []InstanceLoad
	idOf := make(map[uint32]string)
	sent := make(map[uint32]int64)
	p.stats.each(func(id string, s *stat) {
		idOf[s.token] = id
		l := InstanceLoad{ID: id, Requests: s.inFlight.Load(), PrefillTokens: s.prefill.Load(), Share: s.share.Load()}
		s.pubRequests.Store(l.Requests)
		s.pubShare.Store(l.Share)
		s.pubPrefill.Store(l.PrefillTokens)
		sent[s.token] = l.Requests
		if l.Requests != 0 || l.PrefillTokens != 0 || l.Share != 0 {
			loads = append(loads, l)
		}
	})
	r := p.log.since(since, idOf)
	r.Loads = loads
	r.Forward = p.forwardAddr()
	if puller != "" {
		p.pullers.sent(puller, r.Seq, sent, p.tuning.Now(), p.tuning.PullerGone)
		p.updateKnown()
	}
	return r
}

// PeerApplied records that the peer named puller applied the report
// numbered seq, the last one it pulled: from now on this replica counts its
// sends beyond that report alone (see pullers).
func (p *Policy) PeerApplied(puller string, seq uint64) {
	if p.pullers.applied(puller, seq) {
		p.updateKnown()
	}
}

// updateKnown sets every instance's knownRequests from the pullers. It
// holds the pullers' lock throughout, so that two pulls answered at once
// cannot store their results out of order (an older, larger count last).
func (p *Policy) updateKnown() {
	p.pullers.mu.Lock()
	defer p.pullers.mu.Unlock()
	p.stats.each(func(_ string, s *stat) { s.knownRequests.Store(p.pullers.known(s.token)) })
}

// pullers remembers the requests per instance of the last two reports sent
// to each peer that pulls this replica's, to bound what every peer is sure
// to know of this replica (knownRequests). A peer pulls one report at a
// time, so when it asks for the next one it has applied the previous; the
// last one may still be on its way, until the peer says it applied it
// (PeerApplied). Until then it holds either, and this replica counts its
// requests beyond the smaller of the two, which keeps the threshold's
// bound (see overThreshold) whichever the peer holds. Counting beyond the
// last report sent, as this replica did at first, let a burst take an
// instance to T + 3 with two replicas: the report that reset the count had
// not reached the peer, which still granted its part of headroom that was
// no longer there. Counting beyond the previous report until the next pull
// (no acknowledgement) kept the bound but cost agreement: replicas spilled
// more (support-bot in the policy's agreement test: 98.0 → 96.4 %).
type pullers struct {
	mu     sync.Mutex
	byName map[string]*pulled
}

type pulled struct {
	at         time.Time
	seq        uint64 // of the last report sent
	prev, last map[uint32]int64
}

// sent records the requests per instance (by stat token) of the report
// numbered seq sent to puller, and forgets pullers that have not pulled
// for gone (Tuning.PullerGone): a peer scaled away must not hold the
// bound down for ever.
func (ps *pullers) sent(puller string, seq uint64, requests map[uint32]int64, now time.Time, gone time.Duration) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byName == nil {
		ps.byName = make(map[string]*pulled)
	}
	e := ps.byName[puller]
	if e == nil {
		e = &pulled{}
		ps.byName[puller] = e
	}
	e.prev, e.last, e.seq, e.at = e.last, requests, seq, now
	for name, o := range ps.byName {
		if now.Sub(o.at) > gone {
			delete(ps.byName, name)
		}
	}
}

// applied records that puller applied its last report, if that is the one
// numbered seq; it reports whether anything changed.
func (ps *pullers) applied(puller string, seq uint64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e := ps.byName[puller]
	if e == nil || e.seq != seq {
		return false
	}
	e.prev = e.last
	return true
}

// known is the requests on the instance with token tok that every puller
// is sure to know of: the least of the last two reports sent to each (an
// instance missing from a report, or a report not yet sent, counts 0).
// The caller holds ps.mu.
func (ps *pullers) known(tok uint32) int64 {
	known := int64(math.MaxInt64)
	for _, e := range ps.byName {
		known = min(known, e.prev[tok], e.last[tok])
	}
	if known == math.MaxInt64 {
		return 0
	}
	return known
}

// ApplyPeer replaces a peer's contribution to the loads and shares with r,
// records its placements in the prefix index and adds the hashes its
// requests carried to the popularity sketch.
func (p *Policy) ApplyPeer(r Report) {
	p.peers.mu.Lock()
	if p.peers.byName == nil {
		p.peers.byName = make(map[string][]InstanceLoad)
	}
	p.peers.byName[r.Replica] = r.Loads
	p.peers.mu.Unlock()
	p.recomputePeers()
	p.notePeerForward(r.Replica, r.Forward)
	p.pop.add(r.Seen, r.SeenRequests)
	if len(r.Placements) == 0 {
		return
	}
	t := p.table.Load()
	if t == nil {
		return
	}
	tokens := make(map[string]uint32, len(t.members))
	for _, m := range t.members {
		tokens[m.ID] = m.stat.token
	}
	p.index.addPlacements(r.Placements, tokens)
}

// ForgetPeer drops a peer's contribution (it is gone, or its reports are
// stale); its placements stay in the index, where they age out as usual.
func (p *Policy) ForgetPeer(replica string) {
	p.peers.mu.Lock()
	_, ok := p.peers.byName[replica]
	delete(p.peers.byName, replica)
	p.peers.mu.Unlock()
	if ok {
		p.recomputePeers()
	}
	p.notePeerForward(replica, "")
}

// Peers is the number of peers whose reports are counted.
func (p *Policy) Peers() int {
	p.peers.mu.Lock()
	defer p.peers.mu.Unlock()
	return len(p.peers.byName)
}

// recomputePeers sets every instance's peer counters to the sum of the
// peers' latest reports. Recomputing (rather than adding differences)
// keeps the counters right across instances pruned and re-added.
func (p *Policy) recomputePeers() {
	p.peers.mu.Lock()
	defer p.peers.mu.Unlock()
	sum := make(map[string]InstanceLoad)
	for _, loads := range p.peers.byName {
		for _, l := range loads {
			s := sum[l.ID]
			s.Requests += l.Requests
			s.PrefillTokens += l.PrefillTokens
			s.Share += l.Share
			sum[l.ID] = s
		}
	}
	p.shared.Store(len(p.peers.byName) > 0)
	p.stats.each(func(id string, s *stat) {
		l := sum[id]
		s.peerRequests.Store(max(l.Requests, 0))
		s.peerPrefill.Store(max(l.PrefillTokens, 0))
		s.peerShare.Store(max(l.Share, 0))
	})
}

// placementLog is a ring of the most recent placements and of the block
// hashes requests carried (popularity), numbered from 1, for peers to pull
// with LocalReport. Its entries hold no pointers (instances by their stat
// token, resolved to IDs only when a peer pulls): the ring is large (1<<17
// entries by default) and written on every decision, and a ring of strings
// made the garbage collector scan megabytes and every write pay a write
// barrier, which showed in the decision's p99.
type placementLog struct {
	mu   sync.Mutex
	ring []logEntry
	seq  uint64 // number of the last entry logged
}

// logEntry is a placement of hash on the instance with token tok at
// version ver, or (kind seen) a block hash a request carried; kind
// seenFirst marks the first hash of a request's chain, so that a range of
// entries knows how many requests it holds.
type logEntry struct {
	hash     uint64
	tok, ver uint32
	kind     logKind
}

type logKind uint8

const (
	logPlacement logKind = iota
	logSeen
	logSeenFirst
)

// newPlacementLog returns a log of at least n entries, rounded up to a
// power of two so that an entry's slot is its number masked rather than
// divided: put runs for every block hash of every decision.
func newPlacementLog(n int) *placementLog {
	return &placementLog{ring: make([]logEntry, 1<<bits.Len(uint(max(n, 1)-1)))}
}

// slot is where the entry numbered seq lives in the ring.
func (l *placementLog) slot(seq uint64) *logEntry {
	return &l.ring[seq&uint64(len(l.ring)-1)]
}

// add logs that the hashes at depths were placed on the instance with
// token tok at version ver.
func (l *placementLog) add(hashes []uint64, depths []int, tok, ver uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range depths {
		l.put(logEntry{hash: hashes[d], tok: tok, ver: ver})
	}
}

// addSeen logs the hashes one request carried.
func (l *placementLog) addSeen(hashes []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, h := range hashes {
		k := logSeen
		if i == 0 {
			k = logSeenFirst
		}
		l.put(logEntry{hash: h, kind: k})
	}
}

func (l *placementLog) put(e logEntry) {
	l.seq++
	*l.slot(l.seq) = e
}

// since returns the part of a Report that the log holds: the last
// sequence number and the entries after since, truncated to what the ring
// still holds (the placements, with instance IDs from idOf — a placement
// on an instance the registry has forgotten is left out — and the seen
// hashes counted per hash). A first pull (since 0) carries no seen hashes:
// the peer either starts as fresh as this replica or restored a snapshot
// that already counts them, and counts are not idempotent as placements
// are.
func (l *placementLog) since(since uint64, idOf map[uint32]string) Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := Report{Seq: l.seq}
	if since >= l.seq {
		return r
	}
	from := since + 1
	if oldest := l.seq - min(l.seq, uint64(len(l.ring))) + 1; from < oldest {
		from, r.Truncated = oldest, since != 0 || oldest > 1
	}
	var counts map[uint64]uint32
	for s := from; s <= l.seq; s++ {
		e := *l.slot(s)
		switch {
		case e.kind == logPlacement:
			if id, ok := idOf[e.tok]; ok {
				r.Placements = append(r.Placements, Placement{Hash: e.hash, Instance: id, Version: e.ver})
			}
		case since != 0:
			if counts == nil {
				counts = make(map[uint64]uint32)
			}
			counts[e.hash]++
			if e.kind == logSeenFirst {
				r.SeenRequests++
			}
		}
	}
	for h, n := range counts {
		r.Seen = append(r.Seen, SeenHash{Hash: h, Count: n})
	}
	return r
}
