package policy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/warmroute/warmroute/api/hrw"
)

// referenceRank is the ranking the policy used before rankTop: every
// member scored and insertion-sorted by descending score, ties by position.
// Slow (quadratic) and obviously right, it is what rankTop must equal.
func referenceRank(t *table, set []int, key uint64) []int {
	out := slices.Clone(set)
	scores := make([]float64, 0, len(set))
	for _, i := range out {
		scores = append(scores, hrw.Score(key, t.members[i].idHash, t.members[i].weight))
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && (scores[j] > scores[j-1] || scores[j] == scores[j-1] && out[j] < out[j-1]); j-- {
			scores[j], scores[j-1] = scores[j-1], scores[j]
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// referenceFallbackOrder is fallbackOrder before it ranked only the
// members outside the parent set.
func referenceFallbackOrder(t *table, allowed []int, w walk, chosen int) []int {
	order := []int{chosen}
	for _, m := range w.parent {
		if m != chosen {
			order = append(order, m)
		}
	}
	if len(w.parent) < len(allowed) {
		for _, m := range referenceRank(t, allowed, w.hashes[w.leaf]) {
			if !slices.Contains(w.parent, m) {
				order = append(order, m)
			}
		}
	}
	return order
}

// randomTable is a table of n members with random weights, where about one
// member in eight shares another's name hash and weight, so that scores tie
// exactly and the order falls back on position.
func randomTable(r *rand.Rand, n int) *table {
	t := &table{}
	for i := range n {
		m := member{idHash: r.Uint64(), weight: float64(1 + r.IntN(3))}
		if i > 0 && r.IntN(8) == 0 {
			m = t.members[r.IntN(i)]
		}
		m.stat = &stat{token: uint32(i + 1)}
		t.members = append(t.members, m)
		t.all = append(t.all, i)
	}
	return t
}

// randomSet is a random subset of the table's members in random order.
func randomSet(r *rand.Rand, t *table) []int {
	set := slices.Clone(t.all)
	r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
	return set[:1+r.IntN(len(set))]
}

// TestRankTopIsTheReferenceOrder: for random tables (1 to 1,100 members,
// exact ties included), sets and depths, rankTop returns exactly the first
// k of the reference order, and rank all of it.
func TestRankTopIsTheReferenceOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 1))
	sizes := []int{1, 2, 3, 5, 8, 16, 31, 32, 33, 64, 100, 256, 1100}
	for round := range 3000 {
		n := sizes[round%len(sizes)]
		if round%len(sizes) == len(sizes)-1 && round > 300 {
			n = 1 + r.IntN(40) // mostly small after a few large ones
		}
		tb := randomTable(r, n)
		set := randomSet(r, tb)
		key := r.Uint64()
		want := referenceRank(tb, set, key)
		k := r.IntN(len(set) + 2)
		if round%5 == 0 {
			k = 1 + r.IntN(min(len(set), 8)) // the replica-set walk's depths
		}
		got := rankTop(tb, set, key, k, nil)
		if wantK := want[:min(k, len(want))]; !slices.Equal(got, wantK) {
			t.Fatalf("round %d: %d members, set of %d, k=%d: rankTop %v, reference prefix %v", round, n, len(set), k, got, wantK)
		}
		if got := rank(tb, set, key, nil); !slices.Equal(got, want) {
			t.Fatalf("round %d: rank %v, reference %v", round, got, want)
		}
	}
}

// TestFallbackOrderIsTheReference: for random tables, allowed sets, parent
// sets (the walk's, in the anchor's order) and chosen members, fallbackOrder
// is the reference's order.
func TestFallbackOrderIsTheReference(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 2))
	for round := range 2000 {
		n := []int{1, 2, 7, 8, 64, 65, 300, 1100}[round%8]
		tb := randomTable(r, n)
		allowed := randomSet(r, tb)
		slices.Sort(allowed) // as candidates gives them
		key := r.Uint64()
		parentSet := slices.Clone(allowed)
		r.Shuffle(len(parentSet), func(i, j int) { parentSet[i], parentSet[j] = parentSet[j], parentSet[i] })
		parentSet = parentSet[:1+r.IntN(len(parentSet))]
		w := walk{hashes: []uint64{r.Uint64(), key}, leaf: 1, parent: referenceRank(tb, parentSet, key)}
		chosen := w.parent[r.IntN(len(w.parent))]
		want := referenceFallbackOrder(tb, allowed, w, chosen)
		if got := fallbackOrder(tb, allowed, w, chosen); !slices.Equal(got, want) {
			t.Fatalf("round %d: %d members, %d allowed, parent %d: got %v, want %v", round, n, len(allowed), len(w.parent), got, want)
		}
	}
}
