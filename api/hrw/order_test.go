package hrw

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopIsTheSortedPrefix: Top's selection, radix sort and comparison
// sort all give the first k of the list sorted by Before, for sets on
// both sides of radixFrom and scores that tie.
func TestTopIsTheSortedPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for range 400 {
		n := r.IntN(600)
		all := make([]Scored, n)
		for i := range all {
			all[i] = Scored{Score: float64(r.Uint64() >> 11), Item: i}
			if i > 0 && r.IntN(8) == 0 {
				all[i].Score = all[r.IntN(i)].Score // a tie, settled by Item
			}
		}
		r.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
		want := slices.SortedFunc(slices.Values(all), func(a, b Scored) int {
			if a.Before(b) {
				return -1
			}
			return 1
		})
		k := r.IntN(n + 2)
		got := Top(slices.Clone(all), make([]Scored, n), k)
		if !slices.Equal(got, want[:min(k, n)]) {
			t.Fatalf("n=%d k=%d: Top differs from the sorted prefix", n, k)
		}
	}
}
