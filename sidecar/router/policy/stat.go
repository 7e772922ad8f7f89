package policy

import (
	"sync"
	"sync/atomic"
)

// counters are the live state of one instance, kept by ID across config
// reloads so that requests started under an old document are still
// counted (and released) on the same counters.
type counters struct {
	Token    uint32       // small stable number used in the prefix index
	InFlight atomic.Int64 // requests decided and not finished
	// Prefill estimates the prompt tokens of the requests decided that
	// the instance has yet to prefill (released at the first token).
	Prefill atomic.Int64
	// Share is a decayed count of decisions that chose this instance,
	// which placement of new keys balances.
	Share  atomic.Int64
	Joined atomic.Int64 // see joiningAt
	// WarmInFlight and WarmTokens are the warm copies in flight to the
	// instance and the prompt tokens sent it in them since the event.
	WarmInFlight, WarmTokens atomic.Int64
	EjectedUntil             atomic.Int64 // unix nanoseconds
}

// registry hands out one counters per instance ID, so counters survive
// reloads. IDs are pod names; a fleet churns through few enough of them
// that dropping those absent and idle (Prune) is eviction enough.
type registry struct {
	mu    sync.Mutex
	byID  map[string]*counters
	token uint32
}

// Get returns the instance's counters, creating them if need be.
func (r *registry) Get(id string) *counters {
	s, _ := r.Lookup(id)
	return s
}

// Lookup is Get that also reports whether the call created them.
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

// Prune forgets instances no longer configured with nothing in flight.
func (r *registry) Prune(configured map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		if _, ok := configured[id]; !ok && s.InFlight.Load() == 0 {
			delete(r.byID, id)
		}
	}
}
