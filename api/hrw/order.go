package hrw

import (
	"math"
	"slices"
)

// Ordering a large fleet for one key is most of a routing decision at
// hundreds of instances, so Top costs about the fleet's size, not its
// square, and sorts no deeper than the caller reads.

// Scored is an item (an instance's position) with its score for one key.
type Scored struct {
	Score float64
	Item  int
}

// Before reports whether a comes first in the key's order: the higher
// score, ties by the smaller item (a total order, so any sort gives the
// same list).
func (a Scored) Before(b Scored) bool {
	return a.Score > b.Score || a.Score == b.Score && a.Item < b.Item
}

// Top returns the first k of all in the key's order, reordering all and
// using tmp (as long as all) as scratch: the k best kept in a heap, O(n +
// k log k log n), when k is a small part of all; a whole order of a large
// set radix-sorted, O(n).
func Top(all, tmp []Scored, k int) []Scored {
	k = min(k, len(all))
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
	return all[:k]
}

// radixFrom is the smallest set whose whole order is radix-sorted rather
// than compared: below it a comparison sort's n log n compares cost less
// than eight passes over the set.
const radixFrom = 128

func sortScored(all []Scored) {
	slices.SortFunc(all, func(a, b Scored) int {
		if a.Before(b) {
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
func radixSort(all, tmp []Scored) []Scored {
	for shift := 32; shift < 64; shift += 8 {
		var count [256]int
		for _, s := range all {
			count[byte(^math.Float64bits(s.Score)>>shift)]++
		}
		if count[byte(^math.Float64bits(all[0].Score)>>shift)] == len(all) {
			continue
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, s := range all {
			d := byte(^math.Float64bits(s.Score) >> shift)
			tmp[count[d]] = s
			count[d]++
		}
		all, tmp = tmp, all
	}
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].Before(all[j-1]); j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	return all
}

// selectTop moves the k first of all in the key's order (in no particular
// order) to all[:k]: a heap of the k best so far with the worst at its
// root, which a later member replaces only when it comes before it.
func selectTop(all []Scored, k int) {
	if k <= 0 {
		return
	}
	h := all[:k]
	for i := k/2 - 1; i >= 0; i-- {
		siftWorst(h, i)
	}
	for i := k; i < len(all); i++ {
		if all[i].Before(h[0]) {
			h[0], all[i] = all[i], h[0]
			siftWorst(h, 0)
		}
	}
}

// siftWorst restores the heap property below i: every parent comes after
// its children in the key's order, so the root is the worst kept.
func siftWorst(h []Scored, i int) {
	for {
		worst, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[worst].Before(h[l]) {
			worst = l
		}
		if r < len(h) && h[worst].Before(h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}
