package prefixindex

import (
	"slices"
	"testing"
)

// TestMergeRules pins the last-writer-wins register a row per rule: the
// higher version wins whatever the order placements arrive in, an equal
// one elsewhere ties, an older one is kept second.
func TestMergeRules(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		e          Entry
		token, ver uint32
		want       Entry
	}{
		{"first placement", Entry{}, 1, 1, Entry{Tok: [2]uint32{1}, Ver: 1}},
		{"the holder again, newer: its version, no tie", Entry{Tok: [2]uint32{1, 2}, Ver: 3, Tie: true}, 1, 4, Entry{Tok: [2]uint32{1, 2}, Ver: 4}},
		{"the holder again, older: unchanged", Entry{Tok: [2]uint32{1}, Ver: 3}, 1, 2, Entry{Tok: [2]uint32{1}, Ver: 3}},
		{"elsewhere, newer: it holds, the holder is second", Entry{Tok: [2]uint32{1, 5}, Ver: 3}, 2, 4, Entry{Tok: [2]uint32{2, 1}, Ver: 4}},
		{"elsewhere, the same version: tied", Entry{Tok: [2]uint32{1}, Ver: 3}, 2, 3, Entry{Tok: [2]uint32{1, 2}, Ver: 3, Tie: true}},
		{"elsewhere, older, none second: second", Entry{Tok: [2]uint32{1}, Ver: 3}, 2, 2, Entry{Tok: [2]uint32{1, 2}, Ver: 3}},
		{"elsewhere, older, one second already: unchanged", Entry{Tok: [2]uint32{1, 5}, Ver: 3}, 2, 2, Entry{Tok: [2]uint32{1, 5}, Ver: 3}},
	} {
		if got := tc.e.merge(tc.token, tc.ver); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.rule, got, tc.want)
		}
	}
}

// TestCapacityKeepsTheRecent: the index never holds more than its
// capacity, and what it drops is the oldest generation.
func TestCapacityKeepsTheRecent(t *testing.T) {
	x := New(8)
	hashes := make([]uint64, 40)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
		x.AddDepths(hashes, []int{i}, 1, 1)
		if x.Len() > 8 {
			t.Fatalf("%d entries after %d placements, capacity 8", x.Len(), i+1)
		}
	}
	if d, _ := x.Deepest(hashes, 39); d != 39 {
		t.Fatalf("the latest entry is gone")
	}
	if d, _ := x.Deepest(hashes[:20], 0); d != -1 {
		t.Fatalf("entry %d of the first half survived", d)
	}
}

func TestRecordDepthsAreGeometric(t *testing.T) {
	for _, tc := range []struct {
		leaf, n int
		want    []int
	}{
		{0, 1, []int{0}},
		{3, 4, []int{3}},
		{0, 10, []int{0, 1, 2, 4, 8, 9}},
		{5, 40, []int{5, 6, 7, 9, 13, 21, 37, 39}},
	} {
		if got := RecordDepths(nil, tc.leaf, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("leaf %d of %d: %v, want %v", tc.leaf, tc.n, got, tc.want)
		}
	}
	if got := RecordDepths(nil, 0, 1<<20); len(got) > MaxDepths {
		t.Errorf("%d depths, at most %d", len(got), MaxDepths)
	}
}
