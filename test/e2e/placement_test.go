package e2e

import (
	"fmt"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// moves compares group placements: the fraction of groups (present in both)
// that changed instance, and the fraction that moved between two instances
// that both still exist (in keep, or when keep is nil, in before's set),
// with those moves listed for the failure message.
func moves(before, after map[int]string, keep map[string]bool) (moved, between float64, sideways []string) {
	if keep == nil {
		keep = map[string]bool{}
		for _, inst := range before {
			keep[inst] = true
		}
	}
	n, m, b := 0, 0, 0
	for key, from := range before {
		to, ok := after[key]
		if !ok {
			continue
		}
		n++
		if to != from {
			m++
			if keep[from] && keep[to] {
				b++
				group, via := pairOf(key)
				sideways = append(sideways, fmt.Sprintf("group %d via router %d: %s → %s", group, via, from, to))
			}
		}
	}
	if n == 0 {
		return 0, 0, nil
	}
	return float64(m) / float64(n), float64(b) / float64(n), sideways
}

// fraction is the share of groups whose instance satisfies pred.
func fraction(p map[int]string, pred func(string) bool) float64 {
	if len(p) == 0 {
		return 0
	}
	n := 0
	for _, inst := range p {
		if pred(inst) {
			n++
		}
	}
	return float64(n) / float64(len(p))
}

func contains(p map[int]string, inst string) bool {
	for _, v := range p {
		if v == inst {
			return true
		}
	}
	return false
}

// topTwo is the sum of the two largest counts.
func topTwo(counts map[string]int) int {
	var cs []int
	for _, c := range counts {
		cs = append(cs, c)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(cs)))
	sum := 0
	for i := 0; i < len(cs) && i < 2; i++ {
		sum += cs[i]
	}
	return sum
}

func rawMergePatch(b []byte) client.Patch { return client.RawPatch("application/merge-patch+json", b) }
