package policy

import (
	"sync"
	"sync/atomic"
)

// Stat is the live state of one instance, kept by ID across config reloads
// so that requests started under an old document are still counted (and
// released) on the same counters.
type Stat struct {
	token    uint32       // small stable number used in the prefix index
	inFlight atomic.Int64 // requests sent through this router and not finished
	// share is a decayed count of decisions that chose this instance: the
	// router's recent request share, which placement of new keys balances.
	share atomic.Int64
	// ejectedUntil is a unix-nano deadline set by passive or active health.
	ejectedUntil atomic.Int64
}

// InFlight is the number of requests in flight to the instance.
func (s *Stat) InFlight() int64 { return s.inFlight.Load() }

// statRegistry hands out one Stat per instance ID for the process lifetime
// of that ID, so counters survive reloads. IDs are pod names; a fleet churns
// through few enough of them that the registry needs no eviction beyond
// dropping IDs that have been absent and idle (see prune).
type statRegistry struct {
	mu    sync.Mutex
	byID  map[string]*Stat
	token uint32
}

func (r *statRegistry) get(id string) *Stat {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = make(map[string]*Stat)
	}
	s, ok := r.byID[id]
	if !ok {
		r.token++
		s = &Stat{token: r.token}
		r.byID[id] = s
	}
	return s
}

// prune forgets instances that are no longer configured and have nothing in
// flight, so a long-lived router does not accumulate every pod ever seen.
func (r *statRegistry) prune(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		if !keep[id] && s.inFlight.Load() == 0 {
			delete(r.byID, id)
		}
	}
}

// popularity estimates what fraction of recent requests carried a given
// block hash, with a count-min sketch of fixed size whose counts are halved
// every decayEvery requests. Its memory is fixed (rows × width counters)
// whatever the traffic, and it only ever over-estimates, by about
// blocks-per-request ÷ width of the traffic: far below the fractions that
// matter here (a share of one instance).
type popularity struct {
	counts     []atomic.Uint32 // rows × width
	width      uint64
	total      atomic.Int64 // decayed number of requests
	decayEvery int64
	since      atomic.Int64
	decaying   atomic.Bool
}

const sketchRows = 2

func newPopularity(width int, decayEvery int64) *popularity {
	w := uint64(1)
	for w < uint64(width) {
		w <<= 1
	}
	return &popularity{counts: make([]atomic.Uint32, sketchRows*w), width: w, decayEvery: decayEvery}
}

func (p *popularity) slot(row int, h uint64) *atomic.Uint32 {
	x := h
	if row == 1 {
		x = mix64(h ^ 0x9e3779b97f4a7c15)
	}
	return &p.counts[uint64(row)*p.width+(x&(p.width-1))]
}

// estimate returns the count of h (an over-estimate by construction).
func (p *popularity) estimate(h uint64) uint32 {
	a := p.slot(0, h).Load()
	if b := p.slot(1, h).Load(); b < a {
		return b
	}
	return a
}

// record counts one request carrying the given hashes.
func (p *popularity) record(hashes []uint64) {
	for _, h := range hashes {
		p.slot(0, h).Add(1)
		p.slot(1, h).Add(1)
	}
	p.total.Add(1)
	if p.since.Add(1) >= p.decayEvery && p.decaying.CompareAndSwap(false, true) {
		// Halving keeps the estimate about the last ~2×decayEvery requests;
		// a concurrent increment may be halved or not, which is noise well
		// below the fractions the policy compares.
		p.since.Store(0)
		for i := range p.counts {
			if v := p.counts[i].Load(); v != 0 {
				p.counts[i].Store(v / 2)
			}
		}
		p.total.Store(p.total.Load() / 2)
		p.decaying.Store(false)
	}
}

// Bytes is the sketch's fixed memory.
func (p *popularity) Bytes() int { return len(p.counts) * 4 }

// prefixIndex is the bounded, approximate record of which instances were
// recently sent which block hashes. It is two generations of a hash map: new
// entries go into the young one, and when that is full the old generation is
// dropped and the young one ages, so memory never exceeds capacity entries
// and what survives is roughly the most recently used (a cheap LRU). Each
// entry remembers the last two instances that received the block, which is
// enough to recognise a hot prefix that the policy replicated.
type prefixIndex struct {
	mu       sync.Mutex
	young    map[uint64]indexEntry
	old      map[uint64]indexEntry
	capacity int
}

type indexEntry [2]uint32 // instance tokens, most recent first; 0 = none

func newPrefixIndex(capacity int) *prefixIndex {
	capacity = max(capacity, 2)
	return &prefixIndex{young: make(map[uint64]indexEntry, capacity/2), old: map[uint64]indexEntry{}, capacity: capacity}
}

func (x *prefixIndex) lookupLocked(h uint64) (indexEntry, bool) {
	if e, ok := x.young[h]; ok {
		return e, true
	}
	e, ok := x.old[h]
	return e, ok
}

// deepest looks the hashes up from the deepest down to depth from, and
// returns the first (deepest) one any instance holds with its holders, or
// -1.
func (x *prefixIndex) deepest(hashes []uint64, from int) (int, indexEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for d := len(hashes) - 1; d >= from; d-- {
		if e, ok := x.lookupLocked(hashes[d]); ok {
			return d, e
		}
	}
	return -1, indexEntry{}
}

// add records that token was sent the given hashes.
func (x *prefixIndex) add(hashes []uint64, token uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range hashes {
		e, _ := x.lookupLocked(h)
		if e[0] != token {
			e = indexEntry{token, e[0]}
		}
		if len(x.young) >= x.capacity/2 {
			x.old = x.young
			x.young = make(map[uint64]indexEntry, x.capacity/2)
		}
		x.young[h] = e
	}
}

// Len is the number of entries held (at most capacity).
func (x *prefixIndex) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.young) + len(x.old)
}

func (e indexEntry) has(token uint32) bool { return token != 0 && (e[0] == token || e[1] == token) }

// get returns the entry for one hash.
func (x *prefixIndex) get(h uint64) (indexEntry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lookupLocked(h)
}

// addDepths records token for the hashes at the given depths.
func (x *prefixIndex) addDepths(hashes []uint64, depths []int, token uint32) {
	var buf [16]uint64
	sel := buf[:0]
	for _, d := range depths {
		sel = append(sel, hashes[d])
	}
	x.add(sel, token)
}
