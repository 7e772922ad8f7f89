package policy

import (
	"math"
	"slices"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// A guardRule says that the member placement chose may not take the
// request now; the first rule that applies names the spill, which walks
// the request's order (spill).
type guardRule struct {
	reason  string // the spill reason, as counted in metrics
	applies func(v *view, home int) bool
}

// guardRules are the guard, in order. They read requests in flight, not
// tokens: leaving the instance that holds a prefix for a lighter queue
// costs a cold prefill there and one more cached copy, which the next
// requests of the key pay for too; the threshold is where a queue is worth
// that.
var guardRules = []guardRule{
	{SpillUnhealthy, func(v *view, home int) bool { return !v.available(home) }},
	{SpillConcurrency, func(v *view, home int) bool { return v.full(home) }},
}

// guard moves a request off the member affinity chose (order[0]; the rest
// of order is the fallback, the parent set first, warm for the shared
// part) when a guard rule applies.
func (v *view) guard(order []int, u *unrankedTail, x *prefixindex.Match) ([]int, string) {
	for _, r := range guardRules {
		if r.applies(v, order[0]) {
			u.rank(v.table, order)
			return v.spill(order, x, r.reason)
		}
	}
	return order, SpillNone
}

// spill walks order past its first member to the first one available,
// with room under the threshold (hasRoom) and under balanceFactor × the
// average requests in flight; failing that, to the first available one
// with room (the threshold is the limit, the balance cap a preference);
// if none, all busy (overflow).
func (v *view) spill(order []int, x *prefixindex.Match, reason string) ([]int, string) {
	limit := int64(math.Ceil(balanceFactor * float64(v.sum(order, v.inFlight)+1) / float64(len(order))))
	withRoom := -1
	for i, m := range order[1:] {
		if !v.available(m) || !v.hasRoom(m) {
			continue
		}
		if v.inFlight(m)+1 <= limit {
			return moveToFront(order, i+1), reason
		}
		if withRoom < 0 {
			withRoom = i + 1
		}
	}
	if withRoom > 0 {
		return moveToFront(order, withRoom), reason
	}
	if reason == SpillConcurrency {
		reason = SpillAllBusy
	}
	return moveToFront(order, v.overflow(order, x)), reason
}

// spillRoom is the room under the threshold a spill needs: two requests
// (one under a threshold of 8, where one is much of the room). With one,
// an instance is full again at once and its next requests spill too, each
// a cold prefill: bounded loads' known cascade (arXiv:1908.08762).
func spillRoom(threshold int64) int64 {
	if threshold < 8 {
		return 1
	}
	return 2
}

// overflowSlack is how many more requests in flight than the least loaded
// an instance may have and still take an all-busy overflow: 1, the least
// that lets the cost model choose among near-equals (a warm instance one
// request busier beats a cold one), ending at most two above the least.
const overflowSlack = 1

// overflowStay is how many more requests in flight than the least loaded
// home may have and keep an all-busy request unless the cost model says
// leave: a batching engine runs a few more side by side (decodeTokens each,
// far less than a cached prefix); past spillRoom + 1 more, the request
// waits for the queue itself.
const overflowStay = 3

// overflow is the position in order of where a request goes when no
// member has room: among the available members within overflowSlack
// requests of the least loaded, the cheapest; home instead when staysHome
// says so; the least loaded of all when none is available.
func (v *view) overflow(order []int, x *prefixindex.Match) int {
	least := int64(math.MaxInt64)
	for _, m := range order {
		if v.available(m) {
			least = min(least, v.inFlight(m))
		}
	}
	if least == math.MaxInt64 {
		return v.leastLoaded(order)
	}
	home := order[0]
	best, c := v.cheapest(order, x, func(m int) bool { return v.available(m) && v.inFlight(m) <= least+overflowSlack })
	if v.available(home) && staysHome(v.inFlight(home)-least, v.cost(home, x), c) {
		return 0
	}
	return slices.Index(order, best)
}

// staysHome reports whether an all-busy request stays home, above the
// least loaded by requests, costing home there and best at the cheapest:
// within overflowStay, unless home clearly costs more (a short chat behind
// a long prefill); further above, only when leaving clearly costs more.
func staysHome(above, home, best int64) bool {
	if above <= overflowStay {
		return !clearlyMore(home, best)
	}
	return clearlyMore(best, home)
}

// moveToFront moves order[i] to the front, keeping the rest in order, so
// that retries still follow the key's preference.
func moveToFront(order []int, i int) []int {
	v := order[i]
	copy(order[1:i+1], order[:i])
	order[0] = v
	return order
}
