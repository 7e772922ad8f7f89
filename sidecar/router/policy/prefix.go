package policy

import (
	"math"
	"slices"
)

// popularityPrior is added to the request count when turning sketch counts
// into fractions, so that a router that has seen only a handful of requests
// does not take every prefix for a dominant one and scatter its first keys.
const popularityPrior = 32

// prefixAware places a request in three steps.
//
//  1. Replica sets. Walking the block chain from the first block, each
//     block's recent popularity f (fraction of requests that began with the
//     same blocks) says how many instances its prefix deserves:
//     r = ⌈f × N / ReplicaLoad⌉. Where r is smaller than the current set,
//     the set shrinks to the r highest-HRW instances for that block's hash.
//     A prefix shared by everyone keeps the whole fleet (its KV blocks end
//     up warm everywhere, which costs one prompt per instance), a popular
//     document keeps a few instances, and the first block specific enough
//     for one instance — the anchor — picks inside its parent's set. The
//     walk may read past the window (LookaheadBytes) only while every block
//     so far is dominant, which is what separates users behind a system
//     prompt longer than the window.
//  2. Placement of the anchor inside the parent set. If the prefix index
//     says a member was recently sent this anchor (or a deeper block), the
//     request sticks to it; otherwise the anchor's HRW order is walked to
//     the first member whose recent request share is within ShareSlack of
//     the set's average. With equal shares that is the HRW winner, so
//     replicas with the same configuration agree, and since the index only
//     remembers where earlier requests went — mostly HRW winners — it
//     converges to the same answer rather than diverging.
//  3. The overload guard: over ConcurrencyThreshold in flight (or ejected),
//     the request walks the same order — parent set first, which is warm for
//     the shared part, then the rest of the fleet — to the first instance
//     under both the threshold and BalanceFactor × average in flight; if
//     none, the least loaded.
func (p *Policy) prefixAware(t *table, req Request, allowed []int, c *Choice) {
	seed := ScopeSeed(t.cfg.HashSeed, req.Model, req.Tenant)
	bs := t.blockSize
	window := min(req.WindowBytes, len(req.Text))
	var hbuf [96]uint64
	hashes := BlockChain(hbuf[:0], seed, req.Text[:window], bs)
	if len(hashes) == 0 {
		hashes = append(hashes, seed)
	}
	lookahead := req.Text[window:]
	// A partial last window block would otherwise be re-hashed with
	// lookahead bytes; lookahead blocks start where the window ends.
	total := float64(p.pop.total.Load()) + popularityPrior
	n := float64(len(allowed))
	var sbuf, pbuf [32]int
	set := append(sbuf[:0], allowed...)
	var parent []int
	leaf, shared := -1, 0
	for i := 0; ; i++ {
		if i == len(hashes) {
			if len(lookahead) == 0 {
				break
			}
			// Every block of the window is shared by a dominant fraction:
			// read on, hashing the whole lookahead at once so that its
			// blocks' popularity is learnt together rather than one block
			// per generation of requests.
			hashes = BlockChain(hashes, hashes[i-1], lookahead, bs)
			lookahead = nil
		}
		h := hashes[i]
		est := p.pop.estimate(h)
		if est >= 2 && shared == i {
			shared = i + 1
		}
		r := int(math.Ceil(float64(est) / total * n / p.tuning.ReplicaLoad))
		r = max(1, min(r, len(set)))
		if r == len(set) {
			continue
		}
		ranked := rank(t, set, h, pbuf[:0])
		if r == 1 {
			parent, leaf = ranked, i
			break
		}
		set = append(set[:0], ranked[:r]...)
	}
	p.pop.record(hashes)

	chosen, choices := -1, placementChoices
	if leaf < 0 {
		// Nothing told the requests apart: the whole text is a hot prefix
		// served by the replica set; balance by share over all of it.
		leaf = len(hashes) - 1
		parent = rank(t, set, hashes[leaf], pbuf[:0])
		choices = len(parent)
	} else if d, e := p.index.deepest(hashes, leaf); d >= 0 {
		chosen = p.sticky(t, parent, e)
	}
	if chosen < 0 {
		chosen = p.byShare(t, parent, choices)
	}
	c.AnchorDepth = leaf

	// The fallback order: the parent set (warm for the shared part) in the
	// anchor's order, then everyone else in the same key's order.
	order := make([]int, 0, len(allowed))
	order = append(order, chosen)
	for _, m := range parent {
		if m != chosen {
			order = append(order, m)
		}
	}
	if len(parent) < len(allowed) {
		for _, m := range rank(t, allowed, hashes[leaf], nil) {
			if !slices.Contains(parent, m) {
				order = append(order, m)
			}
		}
	}
	c.order, c.Spill = p.guard(t, order)

	token := t.members[c.order[0]].stat.token
	depths := recordDepths(leaf, len(hashes))
	match := 0
	for _, d := range slices.Backward(depths) {
		if e, ok := p.index.get(hashes[d]); ok && e.has(token) {
			match = d + 1
			break
		}
	}
	c.MatchChars = min(match*bs, len(req.Text))
	if c.Spill == SpillNone {
		c.MatchChars = min(max(match, shared)*bs, len(req.Text))
		// Guard spills are not remembered, so that a key returns to its own
		// instance once the overload is over instead of following the spill.
		p.index.addDepths(hashes, depths, token)
	}
}

// recordDepths are the depths remembered in the index for a request: the
// anchor and then geometrically deeper blocks, enough to recognise a long
// match (a growing conversation) at a small, fixed cost per request.
func recordDepths(leaf, n int) []int {
	out := make([]int, 0, 12)
	for step := 0; leaf+step < n; step = max(1, step*2) {
		out = append(out, leaf+step)
	}
	if last := n - 1; last > leaf && out[len(out)-1] != last {
		out = append(out, last)
	}
	return out
}

// stickySlack is the absolute slack (in decisions) of the stickiness bound:
// it keeps the first few hundred decisions, when shares are small numbers,
// from moving keys on noise.
const stickySlack = 16

// sticky returns the member of set that the index says holds the prefix.
// Request share is kept even by moving a few keys (each move costs a cold
// prefill) rather than letting busy keys pile up on one instance, but a key
// over MoveSlack × the average moves only onto one of its own first
// choices that is within ShareSlack of the average (see relieve), never sideways between
// busy instances: after a scale-out every old instance is above the new
// average, so the keys that leave go to the new one and none moves between
// two instances that were both there before. MoveSlack is above ShareSlack (hysteresis), so
// keys near the bound do not ping-pong.
func (p *Policy) sticky(t *table, set []int, e indexEntry) int {
	avg := p.averageShare(t, set)
	bound := p.tuning.MoveSlack*avg + stickySlack
	if p.tuning.ShareSlack < 0 {
		bound = math.Inf(1)
	}
	// The most recent placement first: the index records only placements
	// the policy made (not guard spills), so this is where the key lives.
	for _, tok := range e {
		if tok == 0 {
			continue
		}
		for _, m := range set {
			if t.members[m].stat.token != tok {
				continue
			}
			if float64(t.members[m].stat.share.Load()) <= bound {
				return m
			}
			return p.relieve(t, set, m, avg)
		}
	}
	return -1
}

// relieve picks where a key living on the over-share member m goes: the
// least-shared of the key's first placementChoices members that is within
// ShareSlack of the average, or m itself when none is (moving onto another busy instance
// would cost a cold prefill and balance nothing).
func (p *Policy) relieve(t *table, set []int, m int, avg float64) int {
	best := m
	for _, c := range set[:min(len(set), placementChoices)] {
		share := t.members[c].stat.share.Load()
		if c != m && float64(share) <= p.tuning.ShareSlack*avg && (best == m || share < t.members[best].stat.share.Load()) {
			best = c
		}
	}
	return best
}

// placementChoices is how far down a new key's order placement may go:
// the first two instances, the "power of two choices", which balances load
// nearly as well as looking everywhere while confining each key (and so
// each cached prefix) to two instances however often it is moved.
const placementChoices = 2

// byShare walks the first choices members of set (in the key's order) to
// the first whose recent share is within ShareSlack of the set's average;
// if none is, the one of them with the smallest share.
func (p *Policy) byShare(t *table, set []int, choices int) int {
	if p.tuning.ShareSlack < 0 || len(set) == 1 {
		return set[0]
	}
	avg := p.averageShare(t, set)
	best := set[0]
	for _, m := range set[:min(len(set), choices)] {
		share := t.members[m].stat.share.Load()
		// The √avg slack is about one standard deviation of a count: it
		// keeps a router that has seen little traffic (or a different
		// sample of it than its peers) from placing keys on noise, so
		// replicas agree, and fades relative to the average as counts grow.
		if float64(share) <= p.tuning.ShareSlack*avg+1 {
			return m
		}
		if share < t.members[best].stat.share.Load() {
			best = m
		}
	}
	return best
}

func (p *Policy) averageShare(t *table, set []int) float64 {
	var sum int64
	for _, m := range set {
		sum += t.members[m].stat.share.Load()
	}
	return float64(sum) / float64(len(set))
}

// guard applies the overload guard to a preference order (first = choice).
func (p *Policy) guard(t *table, order []int) ([]int, string) {
	first := order[0]
	reason := SpillNone
	switch {
	case !p.available(t, first):
		reason = SpillUnhealthy
	case t.members[first].stat.inFlight.Load() >= int64(t.cfg.ConcurrencyThreshold):
		reason = SpillConcurrency
	default:
		return order, SpillNone
	}
	var total int64
	for _, m := range order {
		total += t.members[m].stat.inFlight.Load()
	}
	limit := capOf(p.tuning.BalanceFactor, total+1, len(order))
	threshold := int64(t.cfg.ConcurrencyThreshold)
	for i, m := range order[1:] {
		in := t.members[m].stat.inFlight.Load()
		if p.available(t, m) && in < threshold && in+1 <= limit {
			return moveToFront(order, i+1), reason
		}
	}
	best := p.leastLoaded(t, order)
	if reason == SpillConcurrency {
		reason = SpillAllBusy
	}
	if best == 0 {
		return order, reason
	}
	return moveToFront(order, best), reason
}

// moveToFront moves order[i] to the front, keeping the rest in order, so
// that retries still follow the key's preference.
func moveToFront(order []int, i int) []int {
	v := order[i]
	copy(order[1:i+1], order[:i])
	order[0] = v
	return order
}
