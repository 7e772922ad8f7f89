package policy

import (
	"sort"

	"github.com/warmroute/warmroute/sidecar/router/fleet"
	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// The cost model. What a request would cost an instance is the work ahead
// of its first token there: the instance's token load (prompt tokens its
// requests in flight have yet to prefill, plus decodeTokens per request)
// plus the request's own prefill there (its prompt less what the prefix
// index says the instance holds). One picker decides for every router
// replica, so the loads are the fleet's. An instance prefilling one
// 60k-token prompt is far busier than one decoding ten short chats. Placement of a
// long new prompt and the all-busy overflow take the cheapest; leaving the
// instance that holds a prefix must save clearly (clearlyMore), and a
// token spill is charged the cache it leaves behind (lost).

// tokenLoad is an instance's token load.
func (p *Policy) tokenLoad(s *fleet.Stat) int64 {
	return s.Prefill.Load() + decodeTokens*s.InFlight.Load()
}

// cost is the work ahead of the request's first token on the instance.
func (p *Policy) cost(s *fleet.Stat, x *expectation) int64 {
	return p.tokenLoad(s) + x.own(s.Token)
}

// clearlyMore reports whether work a is so far above b that the lighter
// side is worth a cold prefill and one more cached copy of the prefix:
// a is over tokenFloor and over tokenBalance × b.
func clearlyMore(a, b int64) bool {
	return a > tokenFloor && float64(a) > tokenBalance*float64(b)
}

// lost is what leaving an instance where the request's own prefill is
// home for one where it is own costs on top of the cost there: the cache
// left behind, prefilled cold once more. The request waits for that
// prefill, and so does every request queued behind it; a prompt cold on
// both costs nothing more.
func lost(own, home int64) int64 { return max(own-home, 0) }

// cheapest returns the member of set that ok admits where the request
// costs least, and that cost; the earlier in set on ties; -1 if ok admits
// none.
func (p *Policy) cheapest(t *table, set []int, x *expectation, ok func(int) bool) (int, int64) {
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

// longAndCold returns the request's own prefill on the instance with stat
// s, and whether it is a long prompt new there: the index records none of
// it on s and its prefill is at least tokenFloor. Such a prompt has no
// cache to wait for on s (coldPlacement) and, spilled, lives only where it
// went, which the index then remembers.
func (p *Policy) longAndCold(x *expectation, s *fleet.Stat) (int64, bool) {
	if x.hitBytes(s.Token, false) > 0 {
		return 0, false
	}
	own := x.own(s.Token)
	return own, own >= tokenFloor
}

// overThreshold reports whether an instance's requests in flight have
// reached the concurrency threshold. The count is exact: every request of
// every replica is decided, and released, here.
func (p *Policy) overThreshold(t *table, m int) bool {
	return t.Members[m].Stat.InFlight.Load() >= int64(t.Cfg.ConcurrencyThreshold)
}

// sumOver adds up a measure over the members in set.
func sumOver(t *table, set []int, measure func(*fleet.Stat) int64) int64 {
	var sum int64
	for _, m := range set {
		sum += measure(t.Members[m].Stat)
	}
	return sum
}

// expectation is what the prefix index says each instance holds of a
// request, at the recorded depths.
type expectation struct {
	prompt      int64
	bs, textLen int
	shared      int
	seen        int // leading blocks that earlier requests carried too
	hashed      int // blocks hashed
	n           int
	depths      [maxRecordDepths]int
	entries     [maxRecordDepths]prefixindex.Entry
}

func (p *Policy) expect(key Key, bs int, w walk, depths []int) expectation {
	x := expectation{prompt: p.tokensOf(key.PromptBytes), bs: bs, textLen: key.TextBytes, shared: w.shared, hashed: len(w.hashes)}
	x.n = copy(x.depths[:], depths)
	p.index.Entries(w.hashes, x.depths[:x.n], x.entries[:x.n])
	// The index records a few depths per request, so a match at one depth
	// may go on to just before the next: blocks that earlier requests also
	// carried are taken as held wherever the key lives. Counts only fall
	// along a chain, so the first block no request carried is a bisection.
	x.seen = sort.Search(len(w.hashes), func(d int) bool { return p.pop.Estimate(w.hashes[d]) == 0 })
	return x
}

// hitBytes is how much of the routing text the instance with the token is
// expected to hold: the deepest recorded block it was sent, or (withShared)
// the popular leading blocks, which any instance of their set holds.
func (x *expectation) hitBytes(token uint32, withShared bool) int {
	match := 0
	for i := x.n - 1; i >= 0; i-- {
		if x.entries[i].Has(token) {
			match = max(x.depths[i]+1, x.seen)
			break
		}
	}
	if withShared {
		match = max(match, x.shared)
	}
	return min(match*x.bs, x.textLen)
}

// hitFraction is the part of the prompt the instance is expected to hold:
// the part of the hashed text it holds. The rest of the prompt is taken to
// hit at the same rate, which is right for a long shared document and for
// a conversation resent turn after turn.
func (x *expectation) hitFraction(token uint32, withShared bool) float64 {
	hashed := min(x.hashed*x.bs, x.textLen)
	if hashed == 0 {
		return 0
	}
	return float64(x.hitBytes(token, withShared)) / float64(hashed)
}

// own is the prefill the request would bring to the instance.
func (x *expectation) own(token uint32) int64 {
	return x.prompt - int64(float64(x.prompt)*x.hitFraction(token, true))
}
