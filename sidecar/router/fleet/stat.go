// Package fleet keeps the live counters of each instance a policy decides
// over, by instance ID across configuration reloads.
package fleet

import (
	"sync"
	"sync/atomic"
)

// Stat is the live state of one instance, kept by ID across config reloads
// so that requests started under an old document are still counted (and
// released) on the same counters.
type Stat struct {
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
	// fleet (0: it was there from the start); see the policy's joining.
	Joined atomic.Int64
	// WarmInFlight and WarmTokens are the warm copies in flight to the
	// instance and the prompt tokens sent it in them since it joined (see
	// the policy's warm.go).
	WarmInFlight, WarmTokens atomic.Int64
	// EjectedUntil is a unix-nano deadline set by passive or active health.
	EjectedUntil atomic.Int64
}

// Registry hands out one Stat per instance ID for the process lifetime
// of that ID, so counters survive reloads. IDs are pod names; a fleet churns
// through few enough of them that the registry needs no eviction beyond
// dropping IDs that have been absent and idle (see Prune).
type Registry struct {
	mu    sync.Mutex
	byID  map[string]*Stat
	token uint32
}

// Get returns the instance's Stat, creating it if need be.
func (r *Registry) Get(id string) *Stat {
	s, _ := r.Lookup(id)
	return s
}

// Lookup is Get that also reports whether the stat was created by the call.
func (r *Registry) Lookup(id string) (*Stat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = make(map[string]*Stat)
	}
	s, ok := r.byID[id]
	if !ok {
		r.token++
		s = &Stat{Token: r.token}
		r.byID[id] = s
	}
	return s, !ok
}

// Each calls f for every instance the registry holds, under its lock.
func (r *Registry) Each(f func(id string, s *Stat)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		f(id, s)
	}
}

// Prune forgets instances that are no longer configured and have nothing in
// flight, so a long-lived router does not accumulate every pod ever seen.
func (r *Registry) Prune(configured map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		if _, ok := configured[id]; !ok && s.InFlight.Load() == 0 {
			delete(r.byID, id)
		}
	}
}
