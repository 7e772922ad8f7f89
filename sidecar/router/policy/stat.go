package policy

// The live counters of each instance, kept by instance ID across
// configuration reloads.

import (
	"sync"
	"sync/atomic"
)

// Stat is the live state of one instance, kept by ID across config reloads
// so that requests started under an old document are still counted (and
// released) on the same counters.
type counters struct {
	Token    uint32       // small stable number used in the prefix index
	InFlight atomic.Int64 // requests decided and not finished
	// Prefill estimates the prompt tokens of the requests decided that
	// the instance has yet to prefill (charged at the decision, released at
	// the first token).
	Prefill atomic.Int64
	// Share is a decayed count of decisions that chose this instance: its
	// recent request share, which placement of new keys balances.
	Share atomic.Int64
	// Joined is 1 + the share epoch in which the instance joined a running
	// fleet (0: it was there from the start); see joining.
	Joined atomic.Int64
	// WarmInFlight and WarmTokens are the warm copies in flight to the
	// instance and the prompt tokens sent it in them since it joined (see
	// warm.go).
	WarmInFlight, WarmTokens atomic.Int64
	// EjectedUntil is a unix-nano deadline set by passive or active health.
	EjectedUntil atomic.Int64
}

// registry hands out one Stat per instance ID for the process lifetime
// of that ID, so counters survive reloads. IDs are pod names; a fleet churns
// through few enough of them that the registry needs no eviction beyond
// dropping IDs that have been absent and idle (see Prune).
type registry struct {
	mu    sync.Mutex
	byID  map[string]*counters
	token uint32
}

// Get returns the instance's Stat, creating it if need be.
func (r *registry) Get(id string) *counters {
	s, _ := r.Lookup(id)
	return s
}

// Lookup is Get that also reports whether the stat was created by the call.
func (r *registry) Lookup(id string) (*counters, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = make(map[string]*counters)
	}
	s, ok := r.byID[id]
	if !ok {
		r.token++
		s = &counters{Token: r.token}
		r.byID[id] = s
	}
	return s, !ok
}

// Each calls f for every instance the registry holds, under its lock.
func (r *registry) Each(f func(id string, s *counters)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		f(id, s)
	}
}

// Prune forgets instances that are no longer configured and have nothing in
// flight, so a long-lived router does not accumulate every pod ever seen.
func (r *registry) Prune(configured map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		if _, ok := configured[id]; !ok && s.InFlight.Load() == 0 {
			delete(r.byID, id)
		}
	}
}
