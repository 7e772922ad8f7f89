package policy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// A snapshot carries what the elected picker has learnt (the popularity
// sketch, the prefix index, the shares) to its successor, which then
// decides from its first request as the old leader would have. Format,
// integers unsigned varints unless said otherwise:
//
//	"WRPS" version(=3, 1 byte)
//	n, then n × (len, instance ID bytes)      instances referred to below
//	n × share                                 global decayed share per instance
//	width, total, 2×width counts              popularity sketch
//	m, then m × (hash: 8 bytes LE, a, b, v)   index entries, oldest first;
//	                                          a, b = instance number + 1, 0 = none;
//	                                          v = version×2 + tied
//	popSince, shareSince                      decisions since the sketch's
//	                                          and the shares' last halving
//
// Its size is bounded by the configuration: 2×width counts (≤ 5 bytes
// each) and IndexEntries entries (≤ 8+2×3 bytes each) — about 4.5 MB with
// the defaults.

const (
	snapshotMagic   = "WRPS"
	snapshotVersion = 3
	maxSnapshotIDs  = 1 << 16
	maxIDBytes      = 1024
)

// Snapshot encodes the policy's learnt state for Restore.
func (p *Policy) Snapshot() []byte {
	ids := []string{}
	shares := []int64{}
	number := map[uint32]uint64{}
	p.stats.each(func(id string, s *stat) {
		number[s.token] = uint64(len(ids)) + 1
		ids = append(ids, id)
		shares = append(shares, s.share.Load())
	})
	b := append([]byte(snapshotMagic), byte(snapshotVersion))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	for _, s := range shares {
		b = binary.AppendUvarint(b, uint64(max(s, 0)))
	}
	b = binary.AppendUvarint(b, p.pop.width)
	b = binary.AppendUvarint(b, uint64(max(p.pop.total.Load(), 0)))
	for i := range p.pop.counts {
		b = binary.AppendUvarint(b, uint64(p.pop.counts[i].Load()))
	}
	p.index.mu.Lock()
	defer p.index.mu.Unlock()
	b = binary.AppendUvarint(b, uint64(len(p.index.old)+len(p.index.young)))
	for _, gen := range []map[uint64]indexEntry{p.index.old, p.index.young} {
		for h, e := range gen {
			b = binary.LittleEndian.AppendUint64(b, h)
			b = binary.AppendUvarint(b, number[e.tok[0]])
			b = binary.AppendUvarint(b, number[e.tok[1]])
			tie := uint64(0)
			if e.tie {
				tie = 1
			}
			b = binary.AppendUvarint(b, uint64(e.ver)<<1|tie)
		}
	}
	// Where the decay cycles stand, so that the successor halves when its
	// predecessor would have.
	b = binary.AppendUvarint(b, uint64(max(p.pop.since.Load(), 0)))
	return binary.AppendUvarint(b, uint64(max(p.shareSince.Load(), 0)))
}

// Restore replaces the popularity sketch, the prefix index and the shares
// with a snapshot's. It refuses anything that is not a well-formed snapshot
// of a sketch of the same width, changing nothing.
func (p *Policy) Restore(data []byte) error {
	s, err := decodeSnapshot(data, p.pop.width)
	if err != nil {
		return fmt.Errorf("restore policy snapshot: %w", err)
	}
	stats := make([]*stat, len(s.ids))
	for i, id := range s.ids {
		stats[i] = p.stats.get(id)
	}
	for i, st := range stats {
		st.share.Store(int64(s.shares[i]))
	}
	if t := p.table.Load(); t != nil {
		var joined []*stat
		for _, m := range t.members {
			if !slices.Contains(stats, m.stat) {
				joined = append(joined, m.stat)
			}
		}
		p.seedShares(t, joined)
	}
	for i, c := range s.counts {
		p.pop.counts[i].Store(c)
	}
	p.pop.total.Store(int64(s.total))
	p.pop.since.Store(int64(s.popSince))
	p.shareSince.Store(int64(s.shareSince))

	x := p.index
	x.mu.Lock()
	defer x.mu.Unlock()
	x.young = make(map[uint64]indexEntry, x.capacity/2)
	x.old = map[uint64]indexEntry{}
	token := func(n uint64) uint32 {
		if n == 0 {
			return 0
		}
		return stats[n-1].token
	}
	for _, e := range s.entries {
		// Oldest first: a smaller index keeps the most recent.
		if e.a == 0 {
			continue
		}
		x.putLocked(e.hash, indexEntry{tok: [2]uint32{token(e.a), token(e.b)}, ver: uint32(e.v >> 1), tie: e.v&1 == 1})
	}
	return nil
}

type snapshotEntry struct {
	hash    uint64
	a, b, v uint64
}

type decodedSnapshot struct {
	ids                  []string
	shares               []uint64
	total                uint64
	counts               []uint32
	entries              []snapshotEntry
	popSince, shareSince uint64
}

// snapshotReader reads varints and bytes, remembering the first error.
type snapshotReader struct {
	b   []byte
	err error
}

func (r *snapshotReader) uvarint(what string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n <= 0:
		r.err = fmt.Errorf("%s: truncated or overlong varint", what)
		return 0
	case v > limit:
		r.err = fmt.Errorf("%s: %d exceeds %d", what, v, limit)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapshotReader) bytes(what string, n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.err = fmt.Errorf("%s: truncated", what)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func decodeSnapshot(data []byte, width uint64) (*decodedSnapshot, error) {
	if len(data) < len(snapshotMagic)+1 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("not a policy snapshot")
	}
	// Pickers are the only senders and all write snapshotVersion.
	if version := data[len(snapshotMagic)]; version != snapshotVersion {
		return nil, fmt.Errorf("snapshot version %d, want %d", version, snapshotVersion)
	}
	r := &snapshotReader{b: data[len(snapshotMagic)+1:]}
	s := &decodedSnapshot{}
	// Every count is checked against what the remaining bytes can hold
	// before anything is allocated, so garbage cannot make Restore allocate
	// much.
	n := r.uvarint("instances", min(maxSnapshotIDs, uint64(len(r.b))))
	seen := make(map[string]bool, n)
	for range n {
		id := string(r.bytes("instance id", r.uvarint("instance id length", maxIDBytes)))
		if r.err == nil && (id == "" || seen[id]) {
			return nil, fmt.Errorf("instance id %q: empty or duplicate", id)
		}
		seen[id] = true
		s.ids = append(s.ids, id)
	}
	for range n {
		s.shares = append(s.shares, r.uvarint("share", 1<<40))
	}
	if w := r.uvarint("sketch width", 1<<32); r.err == nil && w != width {
		return nil, fmt.Errorf("sketch width %d, this policy's is %d", w, width)
	}
	s.total = r.uvarint("sketch total", 1<<40)
	if r.err == nil && uint64(len(r.b)) < sketchRows*width {
		return nil, errors.New("sketch: truncated")
	}
	s.counts = make([]uint32, 0, sketchRows*width)
	for range sketchRows * width {
		s.counts = append(s.counts, uint32(r.uvarint("sketch count", 1<<32-1)))
		if r.err != nil {
			return nil, r.err
		}
	}
	m := r.uvarint("index entries", uint64(len(r.b))/10)
	s.entries = make([]snapshotEntry, 0, m)
	for range m {
		var e snapshotEntry
		if h := r.bytes("index hash", 8); h != nil {
			e.hash = binary.LittleEndian.Uint64(h)
		}
		e.a = r.uvarint("index instance", n)
		e.b = r.uvarint("index instance", n)
		e.v = r.uvarint("index version", 1<<33-1)
		if r.err != nil {
			return nil, r.err
		}
		s.entries = append(s.entries, e)
	}
	s.popSince = r.uvarint("sketch decay phase", 1<<40)
	s.shareSince = r.uvarint("share decay phase", 1<<40)
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%d bytes after the end of the snapshot", len(r.b))
	}
	return s, nil
}
