package policy

// The load model. Every router replica counts, per instance, its own
// requests in flight and the prefill work it expects them to cause (prompt
// tokens not expected to hit the instance's prefix cache, until the first
// token arrives), and adds its peers' latest reports of the same (see
// peers.go). Two measures come out of it:
//
//   - requests in flight from all replicas, which the concurrency threshold
//     and LEAST_OUTSTANDING_REQUESTS count;
//   - token load = unprefilled prompt tokens + DecodeTokens × requests,
//     which the PREFIX_AWARE guard and placement compare: an instance
//     prefilling one 60k-token prompt is far busier than one decoding ten
//     short chats, though it has fewer requests.

// Placement of new keys compares shares, so replicas place alike only if
// they compare the same numbers: a replica with peers takes its own share
// as it last reported it, not as it is now, so that replica A sees
// A-as-reported + B-as-reported, and so does B, up to the reports that
// crossed since (new keys are then placed from shared inputs only).
//
// Load is different: every load measure below is this replica's own work
// counted live plus the peers' latest reports, so replicas compare numbers
// that differ by what each has sent since its last report. Comparing load
// as reported too kept replicas' numbers identical, but the stale half of
// the picture cost more than it bought: in the benchmark with two replicas
// behind a random spreader (sharegpt, every instance near the threshold),
// live load gave a higher hit rate (50.7 % against 47.0 %), a lower TTFT
// p90 (106 ms against 113 ms) and more agreement between the replicas'
// decisions (60 % against 52 % of peeked requests), because a replica that
// counts what it has just sent spills less. Without peers the live counts
// are the whole picture.

// globalShare is the instance's recent share of decisions of every replica.
func (p *Policy) globalShare(s *stat) int64 {
	if p.shared.Load() {
		return s.pubShare.Load() + s.peerShare.Load()
	}
	return s.share.Load()
}

// placementLoad is the token load that placement of a new key compares
// (see byShare): with peers, every replica's load as last reported, like
// the shares, so that replicas place alike; alone, the live token load.
func (p *Policy) placementLoad(s *stat) int64 {
	if p.shared.Load() {
		return p.tokens(s.pubPrefill.Load()+s.peerPrefill.Load(), reportedRequests(s))
	}
	return p.tokenLoad(s)
}

// reportedRequests is the instance's requests in flight from every replica
// as last reported, this replica's own report included: the count that is
// the same on every replica.
func reportedRequests(s *stat) int64 { return s.pubRequests.Load() + s.peerRequests.Load() }

// requests is the instance's requests in flight from every replica.
func (p *Policy) requests(s *stat) int64 { return s.inFlight.Load() + s.peerRequests.Load() }

// tokenLoad is an instance's token load, from every replica.
func (p *Policy) tokenLoad(s *stat) int64 {
	return p.tokens(s.prefill.Load()+s.peerPrefill.Load(), p.requests(s))
}

// tokens is the token load of unprefilled prompt tokens and requests in
// flight: each request counts DecodeTokens for its decoding.
func (p *Policy) tokens(prefill, requests int64) int64 {
	return prefill + p.tuning.DecodeTokens*requests
}

// overThreshold reports whether this replica must pass over an instance
// because of the concurrency threshold T, which holds per instance across
// the R router replicas:
//
//   - the instance's requests from every replica (this replica's own live,
//     the peers' as reported) have reached T; or
//   - this replica may add, beyond what every peer is sure to know of it
//     (K: the least of the last two reports each peer pulled, see
//     pullers), only its part of the headroom left: ⌈(T − K − P) / R⌉,
//     where P is the sum of the peers' latest reports.
//
// Peers' reports are up to a few hundred milliseconds old, so the first
// rule alone could be overrun by every replica at once. The second bounds
// the race: each replica i adds under ⌈(T − K_i − P_i)/R⌉ beyond its K_i,
// and every report of i that a peer holds is at least K_i, so P_i is at
// least the sum of the others' K; with ΣK the sum over all replicas, the
// instance holds at most ΣK + R × ⌈(T − ΣK)/R⌉ ≤ T + R − 1 requests; with
// no report at all (K and P are 0) each replica keeps to ⌈T/R⌉. Unlike a
// fixed slice of ⌈T/R⌉ per replica, it does not pass over an instance
// merely because this replica's part of a busy instance happens to be
// large while the instance as a whole has room, which is the common case:
// requests arrive at random replicas.
//
// The first rule counts this replica's own requests live, not as last
// reported, though only the reported numbers are the same on every
// replica: counted as reported, replicas agreed on 2–3 points more of
// peeked requests on support-bot (94 → 96 % with two replicas, 91 → 94 %
// with three), but with two replicas on saturated sharegpt the hit rate
// fell from 59.8 to 56.8 % and TTFT p90 rose from 92 to 98 ms.
func (p *Policy) overThreshold(t *table, m int) bool {
	s := t.members[m].stat
	threshold := int64(t.cfg.ConcurrencyThreshold)
	if p.requests(s) >= threshold {
		return true
	}
	r := p.decidersOf(s)
	if r <= 1 {
		return false
	}
	headroom := max(threshold-s.knownRequests.Load()-s.peerRequests.Load(), 0)
	return beyondKnown(s) >= (headroom+r-1)/r
}

// beyondKnown is how many requests this replica has on the instance beyond
// what every peer is sure to know of (see pullers).
func beyondKnown(s *stat) int64 { return s.inFlight.Load() - s.knownRequests.Load() }

// fleetFull reports whether, as last reported (the numbers every replica
// compares), no available instance of set has room for a spill under the
// concurrency threshold (spillRoom requests, as hasRoom asks): the fleet
// is as full as it is when one router overflows, whatever this replica has
// sent since. Full meant every instance at the threshold before, so one
// instance reported a request under it kept the fleet "not full", and an
// owner's all-busy request for a document cached on its instance left it
// to be prefilled cold elsewhere (see mayStayHome), though no spill could
// have gone to that instance either. Without peers it is false (there are
// no reports, and a lone router has no slice to keep to).
func (p *Policy) fleetFull(t *table, set []int) bool {
	if !p.shared.Load() {
		return false
	}
	threshold := int64(t.cfg.ConcurrencyThreshold)
	for _, m := range set {
		s := t.members[m].stat
		if p.available(t, m) && reportedRequests(s)+spillRoom(threshold) <= threshold {
			return false
		}
	}
	return true
}

// tokenCap is the token load above which an instance counts as overloaded:
// TokenBalance × the average over set, never below TokenFloor.
func (p *Policy) tokenCap(t *table, set []int) int64 {
	sum := sumOver(t, set, p.tokenLoad)
	return max(p.tuning.TokenFloor, int64(p.tuning.TokenBalance*float64(sum)/float64(len(set))))
}

// sumOver adds up one of the load measures above over the members in set.
func sumOver(t *table, set []int, measure func(*stat) int64) int64 {
	var sum int64
	for _, m := range set {
		sum += measure(t.members[m].stat)
	}
	return sum
}
