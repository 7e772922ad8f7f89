package policy

import "github.com/warmroute/warmroute/sidecar/router/prefixindex"

// load is what a decision reads of one member's counters: a decision over
// a whole fleet weighs the loads of all its members.
type load struct {
	inFlight, prefill, share int64
	ejected                  bool
}

// view is all a decision reads: the configuration in force, each member's
// load, read under the decision lock the first time a rule asks (a
// decision over a large fleet reads only the members it weighs), and what
// the prefix index says each member holds of the request (x). The rules
// of one decision see one fleet and are pure functions of it.
type view struct {
	*table
	x         prefixindex.Match
	loads     []load
	read      []uint64 // bit m: loads[m] read in this decision
	now       int64
	epoch     int64
	threshold int64
	// shareSlack bounds new keys' placement by share (negative: pure
	// rendezvous); noWarm turns warming off.
	shareSlack float64
	noWarm     bool
}

// look starts a decision's view of t in the policy's buffers (under
// p.pick).
func (p *Policy) look(t *table) *view {
	v := &p.view
	n := len(t.Members)
	if cap(v.loads) < n {
		v.loads = make([]load, n)
	}
	words := (n + 63) / 64
	if cap(v.read) < words {
		v.read = make([]uint64, words)
	}
	v.loads, v.read = v.loads[:n], v.read[:words]
	clear(v.read)
	v.table, v.x = t, prefixindex.Match{}
	v.now, v.epoch = p.tuning.Now().UnixNano(), p.shareEpoch.Load()
	v.threshold, v.shareSlack, v.noWarm = int64(t.Cfg.ConcurrencyThreshold), p.tuning.ShareSlack, p.tuning.NoWarm
	return v
}

func (v *view) load(m int) *load {
	l := &v.loads[m]
	if bit := uint64(1) << (m % 64); v.read[m/64]&bit == 0 {
		v.read[m/64] |= bit
		s := v.Members[m].Stat
		*l = load{
			inFlight: s.InFlight.Load(), prefill: s.Prefill.Load(), share: s.Share.Load(),
			ejected: s.EjectedUntil.Load() > v.now,
		}
	}
	return l
}

func (v *view) joining(m int) bool { return joiningAt(v.Members[m].Stat.Joined.Load(), v.epoch) }

// warmed reports whether member m has taken as many warm copies as it may:
// warmInFlight at once, warmBudget tokens per event.
func (v *view) warmed(m int) bool {
	s := v.Members[m].Stat
	return s.WarmInFlight.Load() >= warmInFlight || s.WarmTokens.Load() >= warmBudget
}

func (v *view) available(m int) bool { return !v.load(m).ejected }

// full reports whether member m's requests in flight have reached the
// concurrency threshold: exact, as one picker decides for every replica.
func (v *view) full(m int) bool { return v.load(m).inFlight >= v.threshold }

// hasRoom reports whether a spill may go to member m: spillRoom requests
// of room under the threshold.
func (v *view) hasRoom(m int) bool { return v.load(m).inFlight+spillRoom(v.threshold) <= v.threshold }

// tokenLoad is member m's work ahead of a new request's first token.
func (v *view) tokenLoad(m int) int64 { l := v.load(m); return l.prefill + decodeTokens*l.inFlight }

func (v *view) inFlight(m int) int64 { return v.load(m).inFlight }
func (v *view) share(m int) int64    { return v.load(m).share }

func (v *view) sum(set []int, measure func(int) int64) int64 {
	var s int64
	for _, m := range set {
		s += measure(m)
	}
	return s
}

func (v *view) average(set []int, measure func(int) int64) float64 {
	return float64(v.sum(set, measure)) / float64(len(set))
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
	best := 0
	for i, m := range order[1:] {
		a, b := v.available(m), v.available(order[best])
		if a && !b || a == b && v.inFlight(m) < v.inFlight(order[best]) {
			best = i + 1
		}
	}
	return best
}
