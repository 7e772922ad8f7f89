package policy

import (
	"math"
	"slices"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// guard moves a request off the instance affinity chose (order[0]; the
// rest of order is the fallback, the parent set first, warm for the
// shared part): ejected or at the threshold, it must leave along its order
// (spillByRequests); else, when home is overloaded, it leaves for the
// first instance along its order, under the threshold and not overloaded,
// where its cost with the lost cache charged is clearly less.
func (p *Policy) guard(t *table, order []int, u *unrankedTail, x *prefixindex.Match) ([]int, string) {
	home := order[0]
	switch {
	case !p.available(t, home):
		u.rank(t, order)
		return p.spillByRequests(t, order, x, SpillUnhealthy)
	case p.overThreshold(t, home):
		u.rank(t, order)
		return p.spillByRequests(t, order, x, SpillConcurrency)
	}
	avg := float64(sumOver(t, order, p.tokenLoad)) / float64(len(order))
	if !overloaded(p.tokenLoad(t.Members[home].Stat), avg) {
		return order, SpillNone
	}
	u.rank(t, order)
	s := t.Members[home].Stat
	stay, own := p.cost(s, x), x.Own(s.Token)
	for i, m := range order[1:] {
		o := t.Members[m].Stat
		if !p.available(t, m) || p.overThreshold(t, m) || overloaded(p.tokenLoad(o), avg) {
			continue
		}
		if mine := x.Own(o.Token); clearlyMore(stay, p.tokenLoad(o)+mine+lost(mine, own)) {
			return moveToFront(order, i+1), SpillTokens
		}
	}
	return order, SpillNone
}

// overloaded reports whether a token load is clearly more than the
// candidates' average (avg), and so may send requests away on tokens and
// takes none. Within twice the average, the next few requests even a load
// out: a spill would trade a cold prefill for a wait about to end.
func overloaded(load int64, avg float64) bool {
	return load > tokenFloor && float64(load) > tokenBalance*avg
}

// spillByRequests walks order past its first instance to the first one
// available, with room under the threshold (hasRoom) and under
// balanceFactor × the average requests in flight; failing that, to the
// first available one with room (the threshold is the limit, the balance
// cap a preference); if none, all busy (overflow).
func (p *Policy) spillByRequests(t *table, order []int, x *prefixindex.Match, reason string) ([]int, string) {
	limit := int64(math.Ceil(balanceFactor * float64(sumOver(t, order, inFlight)+1) / float64(len(order))))
	withRoom := -1
	for i, m := range order[1:] {
		if !p.available(t, m) || !p.hasRoom(t, m) {
			continue
		}
		if inFlight(t.Members[m].Stat)+1 <= limit {
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
	return moveToFront(order, p.overflow(t, order, x)), reason
}

func inFlight(s *counters) int64 { return s.InFlight.Load() }

// hasRoom reports whether a spill may go to an instance: spillRoom
// requests of room under the threshold.
func (p *Policy) hasRoom(t *table, m int) bool {
	threshold := int64(t.Cfg.ConcurrencyThreshold)
	return inFlight(t.Members[m].Stat)+spillRoom(threshold) <= threshold
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
// instance has room: among the available instances within overflowSlack
// requests of the least loaded, the cheapest; home instead when staysHome
// says so; the least loaded of all when none is available.
func (p *Policy) overflow(t *table, order []int, x *prefixindex.Match) int {
	least := int64(math.MaxInt64)
	for _, m := range order {
		if p.available(t, m) {
			least = min(least, inFlight(t.Members[m].Stat))
		}
	}
	if least == math.MaxInt64 {
		return p.leastLoaded(t, order)
	}
	home := order[0]
	best, c := p.cheapest(t, order, x, func(m int) bool {
		return p.available(t, m) && inFlight(t.Members[m].Stat) <= least+overflowSlack
	})
	if p.available(t, home) && staysHome(inFlight(t.Members[home].Stat)-least, p.cost(t.Members[home].Stat, x), c) {
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
