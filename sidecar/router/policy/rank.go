package policy

import (
	"sync"

	"github.com/warmroute/warmroute/api/hrw"
)

// A key's preference order is its rendezvous (HRW) order: instances by
// descending score, ties by position in the table (hrw.Top).

// rankScratch scores sets larger than a stack buffer; pooled, as a
// router holds more than one policy.
type rankScratch struct{ all, tmp []hrw.Scored }

var rankPool = sync.Pool{New: func() any { return new(rankScratch) }}

// Rank returns set in the key's preference order, reusing out's storage.
func rank(t *table, set []int, key uint64, out []int) []int {
	return rankTop(t, set, key, len(set), out)
}

// RankTop returns the first k of rank(t, set, key, out).
func rankTop(t *table, set []int, key uint64, k int, out []int) []int {
	var stack [32]hrw.Scored
	all, tmp := stack[:0], []hrw.Scored(nil)
	if len(set) > len(stack) {
		sc := rankPool.Get().(*rankScratch)
		defer rankPool.Put(sc)
		if cap(sc.all) < len(set) {
			sc.all, sc.tmp = make([]hrw.Scored, 0, len(set)), make([]hrw.Scored, len(set))
		}
		all, tmp = sc.all, sc.tmp
	}
	for _, m := range set {
		score := float64(hrw.Mix64(key^t.Members[m].IDHash) >> 11)
		if !t.Uniform {
			score = hrw.Score(key, t.Members[m].IDHash, t.Members[m].Weight)
		}
		// With equal weights hrw.Score rises with the hash's top 53 bits:
		// the same order without its logarithm.
		all = append(all, hrw.Scored{Score: score, Item: m})
	}
	out = out[:0]
	for _, s := range hrw.Top(all, tmp, k) {
		out = append(out, s.Item)
	}
	return out
}

// unrankedTail says that the last N members of an order are not yet in the
// key's order: the fleet outside the parent set, which only a spill or a
// retry past the ranked part reads, and which would cost more to rank on
// every decision than the rest of it at hundreds of instances.
type unrankedTail struct {
	N   int
	Key uint64
}

// Rank puts the last u.N members of order in the key's order, in place.
func (u *unrankedTail) rank(t *table, order []int) {
	if u.N > 0 {
		rest := order[len(order)-u.N:]
		rank(t, rest, u.Key, rest)
		u.N = 0
	}
}
