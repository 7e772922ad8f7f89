package vllmsim

import (
	"testing"
)

// chain returns n distinct block hashes starting at base.
func chain(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

// fill admits a request holding the given blocks and finishes it, leaving
// them cached and free.
func fill(t *testing.T, p *blockPool, hashes []uint64) {
	t.Helper()
	hits := p.cachedPrefix(hashes)
	if !p.admit(hits, len(hashes)-len(hits)) {
		t.Fatalf("admit %d blocks: no room", len(hashes))
	}
	held := hits
	for _, h := range hashes[len(hits):] {
		held = append(held, p.commit(h))
	}
	p.release(held, 0)
}

func TestBlockPool(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		cached   [][]uint64 // filled in order, each then freed
		lookup   []uint64
		wantHits int
	}{
		{name: "empty pool misses", capacity: 8, lookup: chain(100, 3), wantHits: 0},
		{name: "whole chain hits", capacity: 8, cached: [][]uint64{chain(100, 3)}, lookup: chain(100, 3), wantHits: 3},
		{name: "longest prefix only", capacity: 8, cached: [][]uint64{chain(100, 2)}, lookup: chain(100, 4), wantHits: 2},
		{name: "a gap ends the match", capacity: 8, cached: [][]uint64{{100, 102}}, lookup: chain(100, 3), wantHits: 1},
		{
			name: "the least recently freed chain is evicted", capacity: 4,
			cached: [][]uint64{chain(100, 2), chain(200, 2), chain(300, 2)},
			lookup: chain(100, 2), wantHits: 0,
		},
		{
			name: "the recently freed chain survives", capacity: 4,
			cached: [][]uint64{chain(100, 2), chain(200, 2), chain(300, 2)},
			lookup: chain(300, 2), wantHits: 2,
		},
		{
			name: "eviction takes a chain's tail before its head", capacity: 4,
			cached: [][]uint64{chain(100, 3), chain(200, 2)},
			lookup: chain(100, 3), wantHits: 2,
		},
		{
			name: "a hit refreshes a chain", capacity: 4,
			cached: [][]uint64{chain(100, 2), chain(200, 2), chain(100, 2), chain(300, 2)},
			lookup: chain(100, 2), wantHits: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newBlockPool(tt.capacity)
			for _, c := range tt.cached {
				fill(t, p, c)
			}
			if got := len(p.cachedPrefix(tt.lookup)); got != tt.wantHits {
				t.Errorf("hits = %d, want %d", got, tt.wantHits)
			}
			if p.inUse() != 0 {
				t.Errorf("inUse = %d after every request finished, want 0", p.inUse())
			}
		})
	}
}

func TestBlockPoolRunningBlocksAreNotEvicted(t *testing.T) {
	p := newBlockPool(4)
	if !p.admit(nil, 3) {
		t.Fatal("first admission refused")
	}
	var held []*block
	for _, h := range chain(100, 3) {
		held = append(held, p.commit(h))
	}
	if p.admit(nil, 2) {
		t.Fatal("admitted 2 blocks with 1 free")
	}
	if !p.admit(nil, 1) {
		t.Fatal("refused 1 block with 1 free")
	}
	if got := p.inUse(); got != 4 {
		t.Errorf("inUse = %d, want 4", got)
	}
	// A second request sharing the running chain needs no new blocks.
	shared := p.cachedPrefix(chain(100, 3))
	if len(shared) != 3 || !p.admit(shared, 0) {
		t.Fatalf("sharing a running chain: hits %d", len(shared))
	}
	p.release(shared, 0)
	p.release(held, 1)
	if got := p.inUse(); got != 0 {
		t.Errorf("inUse = %d after release, want 0", got)
	}
	if got := len(p.cachedPrefix(chain(100, 3))); got != 3 {
		t.Errorf("released chain: hits %d, want 3", got)
	}
}

func TestBlockPoolCommitSharesExistingBlock(t *testing.T) {
	p := newBlockPool(4)
	for range 2 {
		if !p.admit(nil, 2) {
			t.Fatal("admission refused")
		}
	}
	a, b := p.commit(7), p.commit(7)
	if a != b || a.refs != 2 {
		t.Fatalf("two commits of one hash: same block %v, refs %d", a == b, a.refs)
	}
	if got := p.inUse(); got != 3 {
		t.Errorf("inUse = %d, want 3 (one shared block, two reserved)", got)
	}
}
