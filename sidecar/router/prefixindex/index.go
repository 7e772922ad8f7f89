// Package prefixindex is the bounded, approximate record of which
// instances were recently sent which block hashes.
package prefixindex

import "sync"

// Index is two generations of a hash map: new entries go into the young
// one, and when that is full the old generation is dropped and the young
// one ages, so memory never exceeds capacity entries and what survives is
// roughly the most recently used (a cheap LRU).
type Index struct {
	mu       sync.Mutex
	young    map[uint64]Entry
	old      map[uint64]Entry
	capacity int
}

// EntryBytes is about what an entry costs in memory, map overhead included.
const EntryBytes = 48

// Entry is where a block lives: a last-writer-wins register. A placement
// carries the version of the entry it followed, or one more when it put
// the key somewhere new; the higher version wins whatever order placements
// are merged in, and two of equal version on different instances are kept
// both, tied, for the key's own HRW order to settle.
type Entry struct {
	Tok [2]uint32 // instance tokens, current holder first; 0 = none
	Ver uint32
	Tie bool // Tok[1] was placed at the same version as Tok[0]
}

// New returns an empty index of at most capacity entries.
func New(capacity int) *Index {
	// Not presized: a replica's own policy fills only while no picker answers.
	return &Index{young: map[uint64]Entry{}, old: map[uint64]Entry{}, capacity: max(capacity, 2)}
}

func (x *Index) lookupLocked(h uint64) (Entry, bool) {
	if e, ok := x.young[h]; ok {
		return e, true
	}
	e, ok := x.old[h]
	return e, ok
}

// Deepest returns the deepest of hashes, down to depth from, that any
// instance holds, with its entry; -1 if none.
func (x *Index) Deepest(hashes []uint64, from int) (int, Entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for d := len(hashes) - 1; d >= from; d-- {
		if e, ok := x.lookupLocked(hashes[d]); ok {
			return d, e
		}
	}
	return -1, Entry{}
}

func (x *Index) putLocked(h uint64, e Entry) {
	if len(x.young) >= x.capacity/2 {
		x.old = x.young
		x.young = make(map[uint64]Entry, x.capacity/2)
	}
	x.young[h] = e
}

// Len is the number of entries held (at most capacity).
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.young) + len(x.old)
}

// merge returns the entry after a placement on token at version ver.
func (e Entry) merge(token, ver uint32) Entry {
	switch {
	case e.Tok[0] == 0:
		return Entry{Tok: [2]uint32{token}, Ver: ver}
	case e.Tok[0] == token:
		if ver > e.Ver {
			e.Ver, e.Tie = ver, false
		}
	case ver > e.Ver:
		e = Entry{Tok: [2]uint32{token, e.Tok[0]}, Ver: ver}
	case ver == e.Ver:
		// A concurrent placement elsewhere: both hold the key, neither wins
		// by recency (Tok[1] may be token already, placed at a lower
		// version: it is tied now).
		e = Entry{Tok: [2]uint32{e.Tok[0], token}, Ver: ver, Tie: true}
	case e.Tok[1] == 0:
		// An older placement: the instance was sent the key, so it may hold
		// it warm, but it is not where the key lives.
		e.Tok[1] = token
	}
	return e
}

// AddDepths records token, at version ver, for the hashes at the given
// depths.
func (x *Index) AddDepths(hashes []uint64, depths []int, token, ver uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, d := range depths {
		e, _ := x.lookupLocked(hashes[d])
		x.putLocked(hashes[d], e.merge(token, ver))
	}
}

// Each calls f for every entry, the older generation first, under the lock.
func (x *Index) Each(f func(h uint64, e Entry)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, gen := range []map[uint64]Entry{x.old, x.young} {
		for h, e := range gen {
			f(h, e)
		}
	}
}

// Reset empties the index and fills it by calling fill with a function
// that stores an entry, oldest first.
func (x *Index) Reset(fill func(put func(h uint64, e Entry))) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.young, x.old = make(map[uint64]Entry, x.capacity/2), map[uint64]Entry{}
	fill(x.putLocked)
}

// MaxDepths bounds the depths recorded for a request: 2^14 blocks at
// RecordDepths' geometric spacing, more than any routing text has.
const MaxDepths = 16

// RecordDepths appends to out the depths the index remembers for a
// request: the anchor and then geometrically deeper blocks, enough to
// recognise a long match (a growing conversation) at a fixed cost.
func RecordDepths(out []int, leaf, n int) []int {
	for step := 0; leaf+step < n && len(out) < MaxDepths-1; step = max(1, step*2) {
		out = append(out, leaf+step)
	}
	if last := n - 1; last > leaf && out[len(out)-1] != last {
		out = append(out, last)
	}
	return out
}

// Match is what the index says each instance holds of one request, at the
// depths recorded for it.
type Match struct {
	Prompt    int64 // the request's prompt, in tokens
	BlockSize int
	TextBytes int // the routing text's length
	Hashed    int // blocks hashed
	// Shared is how many leading blocks are popular (held by any instance
	// of their set); Seen how many earlier requests carried too.
	Shared, Seen int
	n            int
	depths       [MaxDepths]int
	entries      [MaxDepths]Entry
}

// Lookup sets m's entries to those of the hashes at the given depths.
func (x *Index) Lookup(hashes []uint64, depths []int, m *Match) {
	m.n = copy(m.depths[:], depths)
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, d := range m.depths[:m.n] {
		m.entries[i], _ = x.lookupLocked(hashes[d])
	}
}

// HitBytes is how much of the routing text the instance with the token is
// expected to hold: up to the deepest recorded block it was sent (or past
// it, as far as others carried the blocks too), or (withShared) the
// popular leading blocks.
func (m *Match) HitBytes(token uint32, withShared bool) int {
	match := 0
	for i := m.n - 1; i >= 0; i-- {
		if e := m.entries[i]; token != 0 && (e.Tok[0] == token || e.Tok[1] == token) {
			match = max(m.depths[i]+1, m.Seen)
			break
		}
	}
	if withShared {
		match = max(match, m.Shared)
	}
	return min(match*m.BlockSize, m.TextBytes)
}

// HitFraction is the part of the prompt the instance is expected to hold:
// the part of the hashed text it holds, the rest taken to hit at the same
// rate (right for a long shared document and a conversation resent turn
// after turn).
func (m *Match) HitFraction(token uint32, withShared bool) float64 {
	hashed := min(m.Hashed*m.BlockSize, m.TextBytes)
	if hashed == 0 {
		return 0
	}
	return float64(m.HitBytes(token, withShared)) / float64(hashed)
}

// Own is the prefill the request would bring to the instance.
func (m *Match) Own(token uint32) int64 {
	return m.Prompt - int64(float64(m.Prompt)*m.HitFraction(token, true))
}
