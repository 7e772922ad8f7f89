package policy

import (
	"sort"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// The cost model (sidecar/README.md, "How PREFIX_AWARE decides"): what a
// request costs an instance is the work ahead of its first token there,
// the instance's token load plus the request's own uncached prefill. The
// loads are the fleet's: one picker decides for every router replica.

// tokenLoad is an instance's token load.
func (p *Policy) tokenLoad(s *counters) int64 {
	return s.Prefill.Load() + decodeTokens*s.InFlight.Load()
}

// cost is the work ahead of the request's first token on the instance.
func (p *Policy) cost(s *counters, x *prefixindex.Match) int64 {
	return p.tokenLoad(s) + x.Own(s.Token)
}

// clearlyMore reports whether work a is so far above b that the lighter
// side is worth a cold prefill and one more cached copy of the prefix:
// a is over tokenFloor and over tokenBalance × b.
func clearlyMore(a, b int64) bool {
	return a > tokenFloor && float64(a) > tokenBalance*float64(b)
}

// lost is what leaving an instance where the request's own prefill is
// home for one where it is own adds to the cost there: the cache left
// behind, prefilled cold once more, which every request queued behind it
// waits for too.
func lost(own, home int64) int64 { return max(own-home, 0) }

// cheapest returns the member of set that ok admits where the request
// costs least (the earlier on ties; -1: none), and that cost.
func (p *Policy) cheapest(t *table, set []int, x *prefixindex.Match, ok func(int) bool) (int, int64) {
	best, least := -1, int64(0)
	for _, m := range set {
		if !ok(m) {
			continue
		}
		if c := p.cost(t.Members[m].Stat, x); best < 0 || c < least {
			best, least = m, c
		}
	}
	return best, least
}

// longAndCold returns the request's own prefill on s, and whether it is
// a long prompt new there (none of it indexed on s, at least tokenFloor):
// no cache to wait for on s (coldPlacement) and, spilled, it lives only
// where it went, which the index then remembers.
func (p *Policy) longAndCold(x *prefixindex.Match, s *counters) (int64, bool) {
	if x.HitBytes(s.Token, false) > 0 {
		return 0, false
	}
	own := x.Own(s.Token)
	return own, own >= tokenFloor
}

// overThreshold reports whether an instance's requests in flight have
// reached the concurrency threshold. The count is exact: every request of
// every replica is decided, and released, here.
func (p *Policy) overThreshold(t *table, m int) bool {
	return t.Members[m].Stat.InFlight.Load() >= int64(t.Cfg.ConcurrencyThreshold)
}

// sumOver adds up a measure over the members in set.
func sumOver(t *table, set []int, measure func(*counters) int64) int64 {
	var sum int64
	for _, m := range set {
		sum += measure(t.Members[m].Stat)
	}
	return sum
}

// expect is what the prefix index says each instance holds of the
// request, at the recorded depths.
func (p *Policy) expect(key Key, bs int, w walk, depths []int) prefixindex.Match {
	x := prefixindex.Match{Prompt: p.tokensOf(key.PromptBytes), BlockSize: bs, TextBytes: key.TextBytes, Shared: w.shared, Hashed: len(w.hashes)}
	p.index.Lookup(w.hashes, depths, &x)
	// The index records a few depths per request, so a match at one depth
	// may go on to just before the next: blocks that earlier requests also
	// carried are taken as held wherever the key lives. Counts only fall
	// along a chain, so the first block no request carried is a bisection.
	x.Seen = sort.Search(len(w.hashes), func(d int) bool { return p.pop.Estimate(w.hashes[d]) == 0 })
	return x
}
