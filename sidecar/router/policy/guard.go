package policy

import (
	"math"
	"slices"
)

// A guardRule may send a request off the member placement chose (home,
// order[0]): when it applies, to names the position in order the request
// goes to (0: it stays) and the spill's reason.
type guardRule struct {
	name    string
	applies func(v *view, order []int) bool
	to      func(v *view, order []int) (int, string)
}

// guardRules are the guard, in order; the first that applies decides.
// The first two are limits, the third a preference: home's token load is
// clearly more than the candidates' average. Within that, the next few
// requests even a load out: a spill would trade a cold prefill for a wait
// about to end.
var guardRules = []guardRule{
	{"ejected", func(v *view, order []int) bool { return !v.available(order[0]) },
		func(v *view, order []int) (int, string) { return v.spill(order, SpillUnhealthy) }},
	{"at the threshold", func(v *view, order []int) bool { return v.full(order[0]) },
		func(v *view, order []int) (int, string) { return v.spill(order, SpillConcurrency) }},
	{"overloaded", func(v *view, order []int) bool {
		return clearlyMore(v.tokenLoad(order[0]), v.average(order, v.tokenLoad))
	},
		(*view).cheaperElsewhere},
}

// guard moves a request off the member affinity chose (order[0]; the rest
// of order is the fallback) when a guard rule applies.
func (v *view) guard(order []int, u *unrankedTail) ([]int, string) {
	for _, r := range guardRules {
		if r.applies(v, order) {
			u.rank(v.table, order)
			i, reason := r.to(v, order)
			return moveToFront(order, i), reason
		}
	}
	return order, SpillNone
}

// cheaperElsewhere is the first member along order, under the threshold
// and not overloaded, where the request's cost with the lost cache
// charged is clearly less than at home (SpillTokens); home if none.
func (v *view) cheaperElsewhere(order []int) (int, string) {
	avg := v.average(order, v.tokenLoad)
	home := order[0]
	stay, own := v.cost(home), v.x.Own(v.Members[home].Stat.Token)
	for i, m := range order[1:] {
		if !v.available(m) || v.full(m) || clearlyMore(v.tokenLoad(m), avg) {
			continue
		}
		if mine := v.x.Own(v.Members[m].Stat.Token); clearlyMore(stay, float64(v.tokenLoad(m)+mine+lost(mine, own))) {
			return i + 1, SpillTokens
		}
	}
	return 0, SpillNone
}

// lost is what leaving an instance where the request's own prefill is
// home for one where it is own adds to the cost there: the cache left
// behind, prefilled cold once more, which every request queued behind it
// waits for too.
func lost(own, home int64) int64 { return max(own-home, 0) }

// spill is the position in order past its first member of the first one
// available, with room under the threshold (hasRoom) and under
// balanceFactor × the average requests in flight; failing that, of the
// first available one with room (the threshold is the limit, the balance
// cap a preference); if none, all busy (overflow).
func (v *view) spill(order []int, reason string) (int, string) {
	limit := int64(math.Ceil(balanceFactor * float64(v.sum(order, v.inFlight)+1) / float64(len(order))))
	withRoom := -1
	for i, m := range order[1:] {
		if !v.available(m) || !v.hasRoom(m) {
			continue
		}
		if v.inFlight(m)+1 <= limit {
			return i + 1, reason
		}
		if withRoom < 0 {
			withRoom = i + 1
		}
	}
	if withRoom > 0 {
		return withRoom, reason
	}
	if reason == SpillConcurrency {
		reason = SpillAllBusy
	}
	return v.overflow(order), reason
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

const (
	// overflowSlack is how many more requests in flight than the least
	// loaded an instance may have and still take an all-busy overflow: 1,
	// the least that lets the cost model choose among near-equals (a warm
	// instance one request busier beats a cold one).
	overflowSlack = 1
	// overflowStay is how many more requests in flight than the least
	// loaded home may have and keep an all-busy request unless the cost
	// model says leave: a batching engine runs a few more side by side
	// (decodeTokens each, far less than a cached prefix); past spillRoom +
	// 1 more, the request waits for the queue itself.
	overflowStay = 3
)

// overflow is the position in order of where a request goes when no
// member has room: among the available members within overflowSlack
// requests of the least loaded, the cheapest; home instead when staysHome
// says so; the least loaded of all when none is available.
func (v *view) overflow(order []int) int {
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
	best, c := v.cheapest(order, func(m int) bool { return v.available(m) && v.inFlight(m) <= least+overflowSlack })
	if v.available(home) && staysHome(v.inFlight(home)-least, v.cost(home), c) {
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
		return !clearlyMore(home, float64(best))
	}
	return clearlyMore(best, float64(home))
}

// moveToFront moves order[i] to the front, keeping the rest in order, so
// that retries still follow the key's preference.
func moveToFront(order []int, i int) []int {
	v := order[i]
	copy(order[1:i+1], order[:i])
	order[0] = v
	return order
}
