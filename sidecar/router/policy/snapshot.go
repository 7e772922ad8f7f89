package policy

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"slices"

	"github.com/warmroute/warmroute/sidecar/router/popularity"
	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// A snapshot hands what the elected picker has learnt (sketch, index,
// shares) to its successor, which then decides as the old leader would
// have. Gob: pickers of one release write and read it, and gob checks
// every length against its input, so garbage cannot make Restore allocate
// much. About 2×SketchWidth counts and IndexEntries entries: some 4.5 MB
// at the defaults.
type snapshot struct {
	Format     int
	IDs        []string
	Shares     []int64 // decayed share, by IDs' position
	ShareSince int64   // decisions since the shares' last halving
	Sketch     popularity.State
	Entries    []snapshotEntry // oldest first
}

// snapshotEntry is an index entry with its holders as 1 + their position
// in IDs (0: none, or an instance no longer known).
type snapshotEntry struct {
	Hash uint64
	A, B uint32
	Ver  uint32
	Tie  bool
}

// snapshotFormat changes whenever snapshot does; a successor refuses
// another and learns afresh.
const snapshotFormat = 4

// Snapshot encodes the policy's learnt state for Restore.
func (p *Policy) Snapshot() []byte {
	s := snapshot{Format: snapshotFormat, ShareSince: p.shareSince.Load(), Sketch: p.pop.State()}
	number := map[uint32]uint32{}
	p.stats.Each(func(id string, st *counters) {
		s.IDs = append(s.IDs, id)
		s.Shares = append(s.Shares, max(st.Share.Load(), 0))
		number[st.Token] = uint32(len(s.IDs))
	})
	p.index.Each(func(h uint64, e prefixindex.Entry) {
		s.Entries = append(s.Entries, snapshotEntry{Hash: h, A: number[e.Tok[0]], B: number[e.Tok[1]], Ver: e.Ver, Tie: e.Tie})
	})
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&s); err != nil {
		panic("policy: encode snapshot: " + err.Error()) // plain data: cannot fail
	}
	return b.Bytes()
}

// Restore replaces the popularity sketch, the prefix index and the shares
// with a snapshot's. It refuses anything that is not a well-formed snapshot
// of a sketch of the same width, changing nothing.
func (p *Policy) Restore(data []byte) error {
	s, err := decodeSnapshot(data)
	if err == nil {
		err = p.pop.SetState(s.Sketch) // the last check, and the first change
	}
	if err != nil {
		return fmt.Errorf("restore policy snapshot: %w", err)
	}
	stats, tokens := make([]*counters, len(s.IDs)), []uint32{0} // tokens by holder number
	for i, id := range s.IDs {
		stats[i] = p.stats.Get(id)
		stats[i].Share.Store(s.Shares[i])
		tokens = append(tokens, stats[i].Token)
	}
	if t := p.table.Load(); t != nil {
		var joined []*counters
		for _, m := range t.Members {
			if !slices.Contains(stats, m.Stat) {
				joined = append(joined, m.Stat)
			}
		}
		p.seedShares(t, joined)
	}
	p.shareSince.Store(s.ShareSince)
	p.index.Reset(func(put func(uint64, prefixindex.Entry)) {
		for _, e := range s.Entries {
			if e.A == 0 {
				continue // its holder had left the fleet
			}
			put(e.Hash, prefixindex.Entry{Tok: [2]uint32{tokens[e.A], tokens[e.B]}, Ver: e.Ver, Tie: e.Tie})
		}
	})
	return nil
}

// decodeSnapshot decodes and checks a snapshot: every ID named once,
// every holder one of them, nothing negative, nothing after its end.
func decodeSnapshot(data []byte) (*snapshot, error) {
	r := bytes.NewReader(data)
	var s snapshot
	if err := gob.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("not a policy snapshot: %w", err)
	}
	switch {
	case r.Len() != 0:
		return nil, fmt.Errorf("%d bytes after the end of the snapshot", r.Len())
	case s.Format != snapshotFormat:
		return nil, fmt.Errorf("snapshot format %d, want %d", s.Format, snapshotFormat)
	case len(s.Shares) != len(s.IDs):
		return nil, fmt.Errorf("%d shares for %d instances", len(s.Shares), len(s.IDs))
	case s.ShareSince < 0 || slices.ContainsFunc(s.Shares, func(v int64) bool { return v < 0 }):
		return nil, errors.New("negative share")
	}
	seen := make(map[string]bool, len(s.IDs))
	for _, id := range s.IDs {
		if id == "" || seen[id] {
			return nil, fmt.Errorf("instance id %q: empty or duplicate", id)
		}
		seen[id] = true
	}
	n := uint32(len(s.IDs))
	for _, e := range s.Entries {
		if e.A > n || e.B > n {
			return nil, fmt.Errorf("index entry %x: holder out of range", e.Hash)
		}
	}
	return &s, nil
}
