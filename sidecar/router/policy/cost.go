package policy

import (
	"sort"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// cost is what the request costs member m (sidecar/README.md, "How
// PREFIX_AWARE decides"): the work ahead of its first token there, m's
// token load plus the request's own uncached prefill.
func (v *view) cost(m int) int64 {
	return v.tokenLoad(m) + v.x.Own(v.Members[m].Stat.Token)
}

// clearlyMore reports whether work a is so far above b that the lighter
// side is worth a cold prefill and one more cached copy of the prefix:
// a is over tokenFloor and over tokenBalance × b.
func clearlyMore(a int64, b float64) bool {
	return a > tokenFloor && float64(a) > tokenBalance*b
}

// cheapest returns the member of set that ok admits where the request
// costs least (the earlier on ties; -1: none), and that cost.
func (v *view) cheapest(set []int, ok func(int) bool) (int, int64) {
	best, least := -1, int64(0)
	for _, m := range set {
		if !ok(m) {
			continue
		}
		if c := v.cost(m); best < 0 || c < least {
			best, least = m, c
		}
	}
	return best, least
}

// longAndCold returns the request's own prefill on member m, and whether
// it is a long prompt new there (none of it indexed on m, at least
// tokenFloor).
func (v *view) longAndCold(m int) (int64, bool) {
	tok := v.Members[m].Stat.Token
	if v.x.HitBytes(tok, false) > 0 {
		return 0, false
	}
	own := v.x.Own(tok)
	return own, own >= tokenFloor
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
