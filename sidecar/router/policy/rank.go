package policy

import (
	"math"
	"slices"
	"sync"

	"github.com/warmroute/warmroute/api/hrw"
)

// A key's preference order is its rendezvous (HRW) order: instances by
// descending score, ties by position in the table (a total order, so any
// sort gives the same list). One picker decides for a whole endpoint, so
// ranking must cost about the fleet's size, not its square, and go no
// deeper than the caller reads.

// scored is a member with its score for the key being ranked.
type scored struct {
	score float64
	m     int
}

// before reports whether a comes first in the key's order.
func (a scored) before(b scored) bool {
	return a.score > b.score || a.score == b.score && a.m < b.m
}

// rankScratch is scratch for scoring sets larger than a stack buffer,
// and the radix sort's second buffer; pooled, as a router holds more than
// one policy.
type rankScratch struct{ all, tmp []scored }

var rankPool = sync.Pool{New: func() any { return new(rankScratch) }}

// rank returns set in the key's preference order, reusing out's storage.
func rank(t *table, set []int, key uint64, out []int) []int {
	return rankTop(t, set, key, len(set), out)
}

// rankTop returns the first k of rank(t, set, key, out): the k best kept
// in a heap, O(n + k log k log n); a whole order of a large set is
// radix-sorted, O(n).
func rankTop(t *table, set []int, key uint64, k int, out []int) []int {
	var stack [32]scored
	if len(set) <= len(stack) {
		return rankScored(t, set, key, k, stack[:0], nil, out)
	}
	sc := rankPool.Get().(*rankScratch)
	defer rankPool.Put(sc)
	if cap(sc.all) < len(set) {
		sc.all, sc.tmp = make([]scored, 0, len(set)), make([]scored, len(set))
	}
	return rankScored(t, set, key, k, sc.all, sc.tmp, out)
}

// unranked says that the last n members of an order are not yet in the
// key's order: they are the fleet outside the placement's parent set, which
// only a spill or a retry past the ranked part reads, and ranking them on
// every decision cost more than the rest of a decision at hundreds of
// instances.
type unranked struct {
	n   int
	key uint64
}

// rank puts the last u.n members of order in the key's order, in place.
func (u *unranked) rank(t *table, order []int) {
	if u.n > 0 {
		rest := order[len(order)-u.n:]
		rank(t, rest, u.key, rest)
		u.n = 0
	}
}

// radixFrom is the smallest set whose whole order is radix-sorted rather
// than compared: below it a comparison sort's n log n compares cost less
// than eight passes over the set.
const radixFrom = 128

// rankScored is rankTop with scratch for the scores (all, empty) and, for
// sets of radixFrom members or more, for the radix sort (tmp, as long).
func rankScored(t *table, set []int, key uint64, k int, all, tmp []scored, out []int) []int {
	k = min(k, len(set))
	if t.uniform {
		// hrw.Score rises with the hash's top 53 bits when the weights
		// are equal: the same order (and the same ties) without its
		// logarithm and division.
		for _, m := range set {
			all = append(all, scored{float64(hrw.Mix64(key^t.members[m].idHash) >> 11), m})
		}
	} else {
		for _, m := range set {
			all = append(all, scored{hrw.Score(key, t.members[m].idHash, t.members[m].weight), m})
		}
	}
	switch {
	case k < len(all)/4:
		selectTop(all, k)
		all = all[:k]
		sortScored(all)
	case len(all) >= radixFrom:
		all = radixSort(all, tmp[:len(all)])
	default:
		sortScored(all)
	}
	out = out[:0]
	for _, s := range all[:k] {
		out = append(out, s.m)
	}
	return out
}

func sortScored(all []scored) {
	slices.SortFunc(all, func(a, b scored) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
}

// radixSort sorts all into the key's order, using tmp (as long) as the
// second buffer, and returns whichever holds the result. Positive floats'
// bits order like the numbers, so their complement sorts descending: an
// LSD radix sort of the top 32 bits, a byte a pass (skipping bytes every
// score shares), then an insertion sort for what those bits left equal,
// a handful of neighbours.
func radixSort(all, tmp []scored) []scored {
	for shift := 32; shift < 64; shift += 8 {
		var count [256]int
		for _, s := range all {
			count[byte(^math.Float64bits(s.score)>>shift)]++
		}
		if count[byte(^math.Float64bits(all[0].score)>>shift)] == len(all) {
			continue
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, s := range all {
			d := byte(^math.Float64bits(s.score) >> shift)
			tmp[count[d]] = s
			count[d]++
		}
		all, tmp = tmp, all
	}
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].before(all[j-1]); j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	return all
}

// selectTop moves the k first of all in the key's order (in no particular
// order) to all[:k]: a heap of the k best so far with the worst at its
// root, which a later member replaces only when it comes before it.
func selectTop(all []scored, k int) {
	if k <= 0 {
		return
	}
	h := all[:k]
	for i := k/2 - 1; i >= 0; i-- {
		siftWorst(h, i)
	}
	for i := k; i < len(all); i++ {
		if all[i].before(h[0]) {
			h[0], all[i] = all[i], h[0]
			siftWorst(h, 0)
		}
	}
}

// siftWorst restores the heap property below i: every parent comes after
// its children in the key's order, so the root is the worst kept.
func siftWorst(h []scored, i int) {
	for {
		worst, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[worst].before(h[l]) {
			worst = l
		}
		if r < len(h) && h[worst].before(h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}
