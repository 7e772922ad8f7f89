package policy

import (
	"sync"
	"sync/atomic"
)

// stat is the live state of one instance, kept by ID across config reloads
// so that requests started under an old document are still counted (and
// released) on the same counters.
type stat struct {
	token    uint32       // small stable number used in the prefix index
	inFlight atomic.Int64 // requests decided and not finished
	// prefill estimates the prompt tokens of the requests decided that
	// the instance has yet to prefill (charged at the decision, released at
	// the first token).
	prefill atomic.Int64
	// share is a decayed count of decisions that chose this instance: its
	// recent request share, which placement of new keys balances.
	share atomic.Int64
	// joined is 1 + the share epoch in which the instance joined a running
	// fleet (0: it was there from the start); see joining.
	joined atomic.Int64
	// warmInFlight and warmTokens are the warm copies in flight to the
	// instance and the prompt tokens sent it in them since it joined (see
	// warm.go).
	warmInFlight, warmTokens atomic.Int64
	// ejectedUntil is a unix-nano deadline set by passive or active health.
	ejectedUntil atomic.Int64
}

// statRegistry hands out one stat per instance ID for the process lifetime
// of that ID, so counters survive reloads. IDs are pod names; a fleet churns
// through few enough of them that the registry needs no eviction beyond
// dropping IDs that have been absent and idle (see prune).
type statRegistry struct {
	mu    sync.Mutex
	byID  map[string]*stat
	token uint32
}

func (r *statRegistry) get(id string) *stat {
	s, _ := r.lookup(id)
	return s
}

// lookup is get that also reports whether the stat was created by the call.
func (r *statRegistry) lookup(id string) (*stat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = make(map[string]*stat)
	}
	s, ok := r.byID[id]
	if !ok {
		r.token++
		s = &stat{token: r.token}
		r.byID[id] = s
	}
	return s, !ok
}

// each calls f for every instance the registry holds, under its lock.
func (r *statRegistry) each(f func(id string, s *stat)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		f(id, s)
	}
}

// prune forgets instances that are no longer configured and have nothing in
// flight, so a long-lived router does not accumulate every pod ever seen.
func (r *statRegistry) prune(configured map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		if _, ok := configured[id]; !ok && s.inFlight.Load() == 0 {
			delete(r.byID, id)
		}
	}
}
