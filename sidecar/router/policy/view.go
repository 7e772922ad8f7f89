package policy

// load is one member's counters as a decision reads them.
type load struct {
	inFlight, prefill, share int64
	warmInFlight, warmTokens int64
	ejected, joining         bool
}

// view is all a decision reads of the fleet: the configuration in force
// and every member's load, read once under the decision lock, so that the
// rules of one decision see one fleet and are pure functions of it.
type view struct {
	*table
	loads     []load
	threshold int64
	// shareSlack bounds new keys' placement by share (negative: pure
	// rendezvous); noWarm turns warming off.
	shareSlack float64
	noWarm     bool
}

// look reads the view of t into the policy's buffers (decisions run one at
// a time, under p.pick).
func (p *Policy) look(t *table) *view {
	now, epoch := p.tuning.Now().UnixNano(), p.shareEpoch.Load()
	loads := p.loads[:0]
	for _, m := range t.Members {
		s := m.Stat
		joined := s.Joined.Load()
		loads = append(loads, load{
			inFlight: s.InFlight.Load(), prefill: s.Prefill.Load(), share: s.Share.Load(),
			warmInFlight: s.WarmInFlight.Load(), warmTokens: s.WarmTokens.Load(),
			ejected: s.EjectedUntil.Load() > now, joining: joiningAt(joined, epoch),
		})
	}
	p.loads = loads
	p.view = view{table: t, loads: loads, threshold: int64(t.Cfg.ConcurrencyThreshold), shareSlack: p.tuning.ShareSlack, noWarm: p.tuning.NoWarm}
	return &p.view
}

// available reports whether member m is not ejected.
func (v *view) available(m int) bool { return !v.loads[m].ejected }

// full reports whether member m's requests in flight have reached the
// concurrency threshold. The count is exact: every request of every
// replica is decided, and released, by one picker.
func (v *view) full(m int) bool { return v.loads[m].inFlight >= v.threshold }

// hasRoom reports whether a spill may go to member m: spillRoom requests
// of room under the threshold.
func (v *view) hasRoom(m int) bool { return v.loads[m].inFlight+spillRoom(v.threshold) <= v.threshold }

// tokenLoad is member m's work ahead of a new request's first token:
// the prefill it has yet to do, and decodeTokens for each request in
// flight.
func (v *view) tokenLoad(m int) int64 { return v.loads[m].prefill + decodeTokens*v.loads[m].inFlight }

// sum adds up a measure over the members in set.
func (v *view) sum(set []int, measure func(int) int64) int64 {
	var s int64
	for _, m := range set {
		s += measure(m)
	}
	return s
}

func (v *view) inFlight(m int) int64 { return v.loads[m].inFlight }
func (v *view) share(m int) int64    { return v.loads[m].share }

// averageShare is the members of set's average share of recent decisions.
func (v *view) averageShare(set []int) float64 {
	return float64(v.sum(set, v.share)) / float64(len(set))
}

// healthy drops ejected members, failing open when none is left.
func (v *view) healthy(set []int) []int {
	var out []int
	for _, m := range set {
		if v.available(m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return append([]int(nil), set...)
	}
	return out
}

// leastLoaded is the position in order of the available member with the
// fewest requests in flight (the first on ties, so ties follow the key's
// order); if none is available, of any member.
func (v *view) leastLoaded(order []int) int {
	best := -1
	for _, onlyAvailable := range []bool{true, false} {
		for i, m := range order {
			if onlyAvailable && !v.available(m) {
				continue
			}
			if best < 0 || v.inFlight(m) < v.inFlight(order[best]) {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	return 0
}
