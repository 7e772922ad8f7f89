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

// Placement compares loads and shares, so replicas agree only if they
// compare the same numbers. A replica with peers therefore takes its own
// counts as it last reported them, not as they are now: replica A then sees
// A-as-reported + B-as-reported, and so does B, up to the reports that
// crossed since. (Its own live counts still bound what it sends itself; see
// overThreshold.) Without peers the live counts are the whole picture.

// globalShare is the instance's recent share of decisions of every replica.
func (p *Policy) globalShare(s *stat) int64 {
	if p.shared.Load() {
		return s.pubShare.Load() + s.peerShare.Load()
	}
	return s.share.Load()
}

// requests is the instance's requests in flight from every replica.
func (p *Policy) requests(s *stat) int64 {
	if p.shared.Load() {
		return s.pubRequests.Load() + s.peerRequests.Load()
	}
	return s.inFlight.Load()
}

// tokenLoad is an instance's token load, from every replica.
func (p *Policy) tokenLoad(s *stat) int64 {
	if p.shared.Load() {
		return s.pubPrefill.Load() + s.peerPrefill.Load() + p.tuning.DecodeTokens*(s.pubRequests.Load()+s.peerRequests.Load())
	}
	return s.prefill.Load() + p.tuning.DecodeTokens*s.inFlight.Load()
}

// localSlice is the part of the threshold this replica may fill on its
// own: ⌈T/R⌉ with R replicas. Peers' reports are up to a few hundred
// milliseconds old, so the global count alone could be overrun by every
// replica at once; with each replica also bounded by its slice, an instance
// never holds more than R × ⌈T/R⌉ < T + R requests.
func (p *Policy) localSlice(threshold int64) int64 {
	r := max(p.replicas.Load(), 1)
	return (threshold + r - 1) / r
}

// overThreshold reports whether an instance has reached the concurrency
// threshold: globally (its requests from every replica) or in this
// replica's slice of it.
func (p *Policy) overThreshold(t *table, m int) bool {
	s := t.members[m].stat
	threshold := int64(t.cfg.ConcurrencyThreshold)
	return p.requests(s) >= threshold || s.inFlight.Load() >= p.localSlice(threshold)
}

// tokenCap is the token load above which an instance counts as overloaded:
// TokenBalance × the average over set, never below TokenFloor.
func (p *Policy) tokenCap(t *table, set []int) int64 {
	var sum int64
	for _, m := range set {
		sum += p.tokenLoad(t.members[m].stat)
	}
	return max(p.tuning.TokenFloor, int64(p.tuning.TokenBalance*float64(sum)/float64(len(set))))
}
