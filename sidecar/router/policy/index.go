package policy

import "sync"

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
		x.addLocked(h, token)
	}
}

func (x *prefixIndex) addLocked(h uint64, token uint32) {
	e, _ := x.lookupLocked(h)
	if !e.has(token) {
		e = indexEntry{token, e[0]}
	}
	if len(x.young) >= x.capacity/2 {
		x.old = x.young
		x.young = make(map[uint64]indexEntry, x.capacity/2)
	}
	x.young[h] = e
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

// entries looks up the hashes at the given depths in one pass, setting out
// to each one's entry (zero when absent).
func (x *prefixIndex) entries(hashes []uint64, depths []int, out []indexEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, d := range depths {
		out[i], _ = x.lookupLocked(hashes[d])
	}
}

// addPlacements records a peer's placements, translating instance IDs into
// this process's tokens (placements on unknown instances are dropped).
func (x *prefixIndex) addPlacements(ps []Placement, tokens map[string]uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, pl := range ps {
		if tok, ok := tokens[pl.Instance]; ok {
			x.addLocked(pl.Hash, tok)
		}
	}
}
