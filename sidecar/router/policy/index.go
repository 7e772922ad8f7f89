package policy

import "sync"

// prefixIndex is the bounded, approximate record of which instances were
// recently sent which block hashes. It is two generations of a hash map: new
// entries go into the young one, and when that is full the old generation is
// dropped and the young one ages, so memory never exceeds capacity entries
// and what survives is roughly the most recently used (a cheap LRU). Each
// entry remembers the last two instances that were placed the block, which
// is enough to recognise a hot prefix that the policy replicated.
type prefixIndex struct {
	mu       sync.Mutex
	young    map[uint64]indexEntry
	old      map[uint64]indexEntry
	capacity int
}

// indexEntry is where a block lives: a last-writer-wins register. A
// placement carries the version of the entry it followed, or one more when
// it put the key somewhere new (a first placement, a move); the higher
// version wins whatever order placements are merged in, and two of equal
// version on different instances are kept both, tied, for the key's own
// HRW order to settle (see sticky).
type indexEntry struct {
	tok [2]uint32 // instance tokens, current holder first; 0 = none
	ver uint32
	tie bool // tok[1] was placed at the same version as tok[0]
}

func newPrefixIndex(capacity int) *prefixIndex {
	capacity = max(capacity, 2)
	// Not presized: a replica's fallback policy fills only while no picker
	// answers.
	return &prefixIndex{young: map[uint64]indexEntry{}, old: map[uint64]indexEntry{}, capacity: capacity}
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

// putLocked stores an entry in the young generation, ageing the
// generations when it is full.
func (x *prefixIndex) putLocked(h uint64, e indexEntry) {
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

// merge returns the entry after a placement on token at version ver.
func (e indexEntry) merge(token, ver uint32) indexEntry {
	switch {
	case e.tok[0] == 0:
		return indexEntry{tok: [2]uint32{token}, ver: ver}
	case e.tok[0] == token:
		if ver > e.ver {
			e.ver, e.tie = ver, false
		}
	case ver > e.ver:
		e = indexEntry{tok: [2]uint32{token, e.tok[0]}, ver: ver}
	case ver == e.ver:
		// A concurrent placement elsewhere: both hold the key, neither wins
		// by recency (tok[1] may be token already, placed at a lower
		// version: it is tied now).
		e = indexEntry{tok: [2]uint32{e.tok[0], token}, ver: ver, tie: true}
	case e.tok[1] == 0:
		// An older placement: the instance was sent the key, so it may hold
		// it warm, but it is not where the key lives.
		e.tok[1] = token
	}
	return e
}

func (e indexEntry) has(token uint32) bool {
	return token != 0 && (e.tok[0] == token || e.tok[1] == token)
}

// addDepths records token, at version ver, for the hashes at the given
// depths.
func (x *prefixIndex) addDepths(hashes []uint64, depths []int, token, ver uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, d := range depths {
		e, _ := x.lookupLocked(hashes[d])
		x.putLocked(hashes[d], e.merge(token, ver))
	}
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
