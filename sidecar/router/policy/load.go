package policy

// The load model. The policy counts, per instance, the requests it decided
// that are in flight and the prefill work it expects them to cause (prompt
// tokens not expected to hit the instance's prefix cache, until the first
// token arrives). One policy decides for every router replica of an
// endpoint (the elected picker, sidecar/router/picker), so these counts are
// the whole fleet's. Two measures come out of them:
//
//   - requests in flight, which the concurrency threshold and
//     LEAST_OUTSTANDING_REQUESTS count;
//   - token load = unprefilled prompt tokens + DecodeTokens × requests,
//     which the PREFIX_AWARE guard and placement compare: an instance
//     prefilling one 60k-token prompt is far busier than one decoding ten
//     short chats, though it has fewer requests.

// globalShare is the instance's recent share of decisions.
func (p *Policy) globalShare(s *stat) int64 { return s.share.Load() }

// requests is the instance's requests in flight.
func (p *Policy) requests(s *stat) int64 { return s.inFlight.Load() }

// tokenLoad is an instance's token load.
func (p *Policy) tokenLoad(s *stat) int64 {
	return p.tokens(s.prefill.Load(), p.requests(s))
}

// tokens is the token load of unprefilled prompt tokens and requests in
// flight: each request counts DecodeTokens for its decoding.
func (p *Policy) tokens(prefill, requests int64) int64 {
	return prefill + p.tuning.DecodeTokens*requests
}

// overThreshold reports whether an instance's requests in flight have
// reached the concurrency threshold. The count is exact: every request of
// every replica is decided, and released, here.
func (p *Policy) overThreshold(t *table, m int) bool {
	return p.requests(t.members[m].stat) >= int64(t.cfg.ConcurrencyThreshold)
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
