package policy

import (
	"math"
	"sort"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// popularityPrior is added to the request count when turning sketch counts
// into fractions, so that a router that has seen only a handful of requests
// does not take every prefix for a dominant one and scatter its first keys.
const popularityPrior = 32

// PrefixAware sends requests that share a prompt prefix to the instance
// that holds it, within the load guard.
const PrefixAware = routing.StrategyPrefixAware

func init() { register(PrefixAware, prefixAware{}, false) }

// prefixAware places a request in three steps.
//
//  1. Replica sets (replicaSets). Walking the block chain from the first
//     block, each block's recent popularity f (fraction of requests that
//     began with the same blocks) says how many instances its prefix
//     deserves: r = ⌈f × N / ReplicaLoad⌉. Where r is smaller than the
//     current set, the set shrinks to the r highest-HRW instances for that
//     block's hash. A prefix shared by everyone keeps the whole fleet (its
//     KV blocks end up warm everywhere, which costs one prompt per
//     instance), a popular document keeps a few instances, and the first
//     block specific enough for one instance — the anchor — picks inside
//     its parent's set. The walk may read past the window (LookaheadBytes)
//     only while every block so far is dominant, which is what separates
//     users behind a system prompt longer than the window.
//  2. Placement of the anchor inside the parent set (place). If the prefix
//     index says a member was recently sent this anchor (or a deeper
//     block), the request sticks to it; otherwise the anchor's HRW order is
//     walked to the first member whose recent request share is within
//     ShareSlack of the set's average. A new key with a long prefill goes where that
//     prefill finishes first instead (coldPlacement).
//  3. The overload guard (guard) on the fallback order (fallbackOrder: the
//     parent set first, which is warm for the shared part, then the rest of
//     the fleet in the anchor's order).
type prefixAware struct{}

// walk is what the replica-set walk learnt of a request.
type walk struct {
	hashes []uint64
	// parent is the set the anchor was placed in, in the anchor's order;
	// choices is how far down it placement may go.
	parent  []int
	choices int
	// leaf is the anchor's depth; shared is how many leading blocks are
	// popular (likely cached on any instance of their set).
	leaf, shared int
}

func (prefixAware) decide(p *Policy, t *table, key Key, allowed []int) decision {
	var sbuf [32]int
	w := p.replicaSets(t, key, allowed, sbuf[:0], p.parent[:0])
	p.parent = w.parent[:0]
	if key.holdsText() {
		p.chain = w.hashes[:0] // hashed into it, maybe grown: keep it
	}
	return p.decideWalk(t, key, allowed, w, fallbackOrder)
}

// decideWalk is steps 2 and 3 after the walk w, with the fallback order
// given by order.
func (p *Policy) decideWalk(t *table, key Key, allowed []int, w walk, order func(*table, []int, walk, int) []int) decision {
	depths := recordDepths(p.depths[:0], w.leaf, len(w.hashes))
	p.depths = depths[:0]
	x := p.expect(key, t.blockSize, w, depths)
	placed, ver, moved := p.place(t, w)
	chosen := p.coldPlacement(t, w.parent, placed, &x)
	d := decision{placed: chosen}
	d.AnchorDepth, d.ColdPlaced = int32(w.leaf), chosen != placed
	d.order, d.Spill = p.guard(t, order(t, allowed, w, chosen), &x)

	m := t.members[d.order[0]]
	d.MatchChars = x.hitBytes(m.stat.token, d.Spill == SpillNone)
	d.hit = x.hitFraction(m.stat.token, d.Spill == SpillNone)
	// What recording the decision teaches the policy (see learn): every
	// block carried, and where the key now lives. A spill is not
	// remembered, so that the key returns to its own instance, where its
	// cache is, once the overload is over; but a spill of a long prompt
	// cold there is (see remembersSpill).
	d.learning = learning{hashes: w.hashes, depths: depths, token: m.stat.token, ver: ver,
		remember: d.Spill == SpillNone || p.remembersSpill(&x, t.members[chosen].stat)}
	if d.remember {
		d.Moved = moved
	}
	return d
}

// learning is what a PREFIX_AWARE decision teaches the policy, recorded
// by learn after the decision.
type learning struct {
	hashes   []uint64
	depths   []int
	token    uint32
	ver      uint32
	remember bool
}

// learn records a decision: the popularity of every block it carried and,
// when the key's placement is remembered, the index entries at its depths.
func (p *Policy) learn(l *learning) {
	if l.hashes == nil {
		return
	}
	p.pop.record(l.hashes)
	if l.remember {
		p.index.addDepths(l.hashes, l.depths, l.token, l.ver)
	}
}

// remembersSpill reports whether a spill off the instance with stat s is
// recorded in the index where it went: when the index records none of the
// request's blocks on s and the prompt is long (at least TokenFloor tokens
// to prefill there). The prompt then lives only where it went; forgotten,
// the key's next request went back to s and prefilled it a second time.
// A short prompt is not remembered: prefilling it again costs little, and
// its key is better off back home once the overload is over.
func (p *Policy) remembersSpill(x *expectation, s *stat) bool {
	_, long := p.longAndCold(x, s)
	return long
}

// longAndCold returns the prefill the request would bring to the instance
// with stat s, and whether it is a long prompt new there: the index records
// none of its blocks on s and that prefill is at least TokenFloor. Such a
// prompt has no cache to wait for on s (coldPlacement) and, spilled, lives
// only where it went (remembersSpill).
func (p *Policy) longAndCold(x *expectation, s *stat) (int64, bool) {
	if x.hitBytes(s.token, false) > 0 {
		return 0, false
	}
	own := x.own(s.token)
	return own, own >= p.tuning.TokenFloor
}

// replicaSets walks the block chain (step 1), using the given buffers
// (sbuf holds the set once it shrinks; until then it is allowed itself,
// not a copy of the fleet). The walk reads the key's lookahead blocks
// (those past WindowBlocks) only when every block of the window is shared
// by a dominant fraction.
func (p *Policy) replicaSets(t *table, key Key, allowed []int, sbuf, pbuf []int) walk {
	hashes := key.windowBlocks(p.chain[:0])
	if len(hashes) == 0 {
		hashes = []uint64{scopeSeed(t.cfg.HashSeed, key.Model, "")}
	}
	total := float64(p.pop.total.Load()) + popularityPrior
	n := float64(len(allowed))
	set := allowed
	w := walk{leaf: -1, choices: placementChoices, hashes: hashes}
	read := false
	for i := 0; ; i++ {
		if i == len(w.hashes) {
			if read {
				break
			}
			// Every block of the window is shared by a dominant fraction:
			// read on, the whole lookahead at once, so that its blocks'
			// popularity is learnt together rather than one block per
			// generation of requests.
			w.hashes, read = key.withLookahead(w.hashes), true
			if i == len(w.hashes) {
				break
			}
		}
		h := w.hashes[i]
		est := p.pop.estimate(h)
		if est >= 2 && w.shared == i {
			w.shared = i + 1
		}
		r := int(math.Ceil(float64(est) / total * n / p.tuning.ReplicaLoad))
		r = max(1, min(r, len(set)))
		if r == len(set) {
			continue
		}
		if r == 1 {
			w.parent, w.leaf = rank(t, set, h, pbuf), i
			break
		}
		set = append(sbuf[:0], rankTop(t, set, h, r, pbuf)...)
	}
	if w.leaf < 0 {
		// Nothing told the requests apart: the whole text is a hot prefix
		// served by the replica set; balance by share over all of it.
		w.leaf = len(w.hashes) - 1
		w.parent = rank(t, set, w.hashes[w.leaf], pbuf)
		w.choices = len(w.parent)
	}
	return w
}

// place chooses the anchor's instance in its parent set (step 2), the
// version of the placement (the entry's own when the key stays where it
// lives, one more when it goes anywhere else), and why a key the index
// knew moved (MoveNone if it stayed or was new).
func (p *Policy) place(t *table, w walk) (int, uint32, string) {
	var ver uint32
	if w.choices == placementChoices {
		if d, e := p.index.deepest(w.hashes, w.leaf); d >= 0 {
			ver = e.ver
			if m, moved := p.sticky(t, w.parent, e); m >= 0 {
				if moved != MoveNone {
					ver++
				}
				return m, ver, moved
			}
		}
	}
	return p.byShare(t, w.parent, w.choices), ver + 1, MoveNone
}

// fallbackOrder is the order to try instances in: chosen, the rest of the
// parent set (warm for the shared part) in the anchor's order, then
// everyone else in the same key's order.
func fallbackOrder(t *table, allowed []int, w walk, chosen int) []int {
	order := make([]int, 0, len(allowed))
	order = append(order, chosen)
	for _, m := range w.parent {
		if m != chosen {
			order = append(order, m)
		}
	}
	if len(w.parent) < len(allowed) {
		// The rest in the key's order: rank the members outside the
		// parent set (ranking a subset keeps their relative order), found
		// with a bitmap rather than a search of the parent per member.
		var bits [16]uint64 // 1,024 members without allocating
		in := bits[:]
		if words := (len(t.members) + 63) / 64; words > len(bits) {
			in = make([]uint64, words)
		}
		for _, m := range w.parent {
			in[m/64] |= 1 << (m % 64)
		}
		rest := order[len(order):len(order):cap(order)]
		for _, m := range allowed {
			if in[m/64]&(1<<(m%64)) == 0 {
				rest = append(rest, m)
			}
		}
		order = append(order, rank(t, rest, w.hashes[w.leaf], rest)...)
	}
	return order
}

// expectation is what a request is expected to cost each instance: its
// prompt less what the instance is expected to hold, from the prefix index
// at the recorded depths.
type expectation struct {
	prompt      int64
	bs, textLen int
	shared      int
	seen        int // leading blocks that earlier requests carried too
	hashed      int // blocks hashed
	n           int
	depths      [maxRecordDepths]int
	entries     [maxRecordDepths]indexEntry
}

func (p *Policy) expect(key Key, bs int, w walk, depths []int) expectation {
	x := expectation{prompt: p.tokensOf(key.PromptBytes), bs: bs, textLen: key.TextBytes, shared: w.shared}
	x.n = copy(x.depths[:], depths)
	x.hashed = len(w.hashes)
	p.index.entries(w.hashes, x.depths[:x.n], x.entries[:x.n])
	// The index records a few depths per request (geometrically spaced),
	// so a match found at one depth may well go on to just before the next.
	// Blocks that earlier requests also carried are taken as held wherever
	// the key lives: counts only fall along a chain, so the first block no
	// request carried before is found by bisection.
	x.seen = sort.Search(len(w.hashes), func(d int) bool { return p.pop.estimate(w.hashes[d]) == 0 })
	return x
}

// hitBytes is how much of the routing text the instance with the token is
// expected to hold: the deepest recorded block it was sent, or (withShared)
// the popular leading blocks, which any instance of their set holds.
func (x *expectation) hitBytes(token uint32, withShared bool) int {
	match := 0
	for i := x.n - 1; i >= 0; i-- {
		if x.entries[i].has(token) {
			match = x.depths[i] + 1
			break
		}
	}
	if match > 0 {
		match = max(match, x.seen)
	}
	if withShared {
		match = max(match, x.shared)
	}
	return min(match*x.bs, x.textLen)
}

// hitFraction is the part of the prompt the instance is expected to hold:
// the part of the hashed text it holds. The prompt may go on past the
// hashed text (the window, and the lookahead only when the walk read it);
// the rest is taken to hit at the same rate, which is right for a long
// shared document and for a conversation resent turn after turn.
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

// recordDepths appends to out the depths remembered in the index for a request: the
// anchor and then geometrically deeper blocks, enough to recognise a long
// match (a growing conversation) at a small, fixed cost per request.
func recordDepths(out []int, leaf, n int) []int {
	for step := 0; leaf+step < n && len(out) < maxRecordDepths-1; step = max(1, step*2) {
		out = append(out, leaf+step)
	}
	if last := n - 1; last > leaf && out[len(out)-1] != last {
		out = append(out, last)
	}
	return out
}

// maxRecordDepths bounds recordDepths: 2^14 blocks is far more than any
// routing text has.
const maxRecordDepths = 16

// stickySlack is the absolute slack (in decisions) of the stickiness bound,
// max(MoveSlack × average, average + stickySlack): it keeps the first few
// hundred decisions, when shares are small numbers, from moving keys on
// noise (a count of n decisions varies by about √n, 8 at 64), and gives
// way to MoveSlack once the average passes stickySlack / (MoveSlack − 1) =
// 100 decisions per instance.
const stickySlack = 8

// sticky returns the member of set that the index says holds the prefix
// (-1 if none does), and why that is a move (MoveNone if it is not).
// Request share is kept even by moving a few keys (each move costs a cold
// prefill) rather than letting busy keys pile up on one instance, but a
// key over MoveSlack × the average moves only onto one of its own first
// choices that is within ShareSlack of the average (see relieve), never
// sideways between busy instances. MoveSlack is above ShareSlack
// (hysteresis), so keys near the bound do not ping-pong. A scale-out moves
// a known key to the newcomer only while it is joining and the key's first
// choice; the newcomer's random fifth of the keys can leave an old instance
// over MoveSlack, which then sheds keys to other old ones, more than it
// must because its share counts past decisions.
//
// The key lives on the entry's current holder (the highest version, see
// indexEntry), or on its former holder when the current one is not in the
// set; when two holders are tied, on the one earlier in the key's order.
func (p *Policy) sticky(t *table, set []int, e indexEntry) (int, string) {
	home := -1
	for _, m := range set {
		tok := t.members[m].stat.token
		if tok == e.tok[0] || e.tie && tok == e.tok[1] {
			home = m
			break
		}
	}
	moved := MoveNone
	if home < 0 {
		// The current holder left the set (scaled in, or the set shrank):
		// the former holder, if still there, is warm.
		for _, m := range set {
			if e.tok[1] != 0 && t.members[m].stat.token == e.tok[1] {
				home, moved = m, MoveHolderLeft
				break
			}
		}
		if home < 0 {
			return -1, MoveNone
		}
	}
	if p.tuning.ShareSlack < 0 {
		return home, moved
	}
	avg := p.averageShare(t, set)
	if first := t.members[set[0]].stat; set[0] != home && p.joining(first) && float64(p.globalShare(first)) <= p.tuning.ShareSlack*avg {
		// The key's first choice joined the fleet lately: the key goes
		// where rendezvous hashing puts it, while that has room. (A key
		// placed since, on its second choice because the newcomer was
		// over the bound then, comes back too: a move the joining period
		// bounds.)
		return set[0], MoveJoining
	}
	if float64(p.globalShare(t.members[home].stat)) <= max(p.tuning.MoveSlack*avg, avg+stickySlack) {
		return home, moved
	}
	if m := p.relieve(t, set, home, avg); m != home {
		return m, MoveShare
	}
	return home, moved
}

// relieve picks where a key living on the over-share member m goes: the
// least-shared of the key's first placementChoices members that is within
// ShareSlack of the average, or m itself when none is (moving onto another
// busy instance would cost a cold prefill and balance nothing).
func (p *Policy) relieve(t *table, set []int, m int, avg float64) int {
	best := m
	for _, c := range set[:min(len(set), placementChoices)] {
		share := p.globalShare(t.members[c].stat)
		if c != m && float64(share) <= p.tuning.ShareSlack*avg && (best == m || share < p.globalShare(t.members[best].stat)) {
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

// byShare places a new key: among the first choices members of set (in
// the key's order), the first whose recent share is within ShareSlack of
// the set's average (+1, so that the first decisions, when every share is
// a handful, do not place keys on noise); if none is, the one with the
// smallest share. Token load is not its concern: a long new prompt goes
// where its prefill finishes first (coldPlacement), and a short one to an
// overloaded instance is spilled by the guard.
func (p *Policy) byShare(t *table, set []int, choices int) int {
	if p.tuning.ShareSlack < 0 || len(set) == 1 {
		return set[0]
	}
	bound := p.newKeyShareBound(t, set)
	best := set[0]
	for _, m := range set[:min(len(set), choices)] {
		share := p.globalShare(t.members[m].stat)
		if float64(share) <= bound {
			return m
		}
		if share < p.globalShare(t.members[best].stat) {
			best = m
		}
	}
	return best
}

// coldPlacement moves a new key with a long prompt to where its prefill
// would finish soonest. The key is new to chosen (the index records none
// of it there) and its prefill there is at least TokenFloor: the cache
// gives it no reason to wait behind chosen's queue, and the instance that
// prefills it is where the index sends its next requests. It goes to the
// member of set, in the key's order, with the least work ahead of its
// first token (workAhead: token load plus its own prefill there) among
// those with room under the threshold and within the share bound; ties
// stay with the earlier one. Shorter new keys keep the two choices of
// byShare: their prefill is too small to queue behind, and a key that
// stays on its HRW choices is where the fallback (Fallback) would put it
// too.
func (p *Policy) coldPlacement(t *table, set []int, chosen int, x *expectation) int {
	s := t.members[chosen].stat
	if len(set) < 2 {
		return chosen
	}
	own, long := p.longAndCold(x, s)
	if !long {
		return chosen
	}
	bound := math.Inf(1)
	if p.tuning.ShareSlack >= 0 {
		bound = p.newKeyShareBound(t, set)
	}
	best, ahead := chosen, p.tokenLoad(s)+own // workAhead, own computed once
	for _, m := range set {
		o := t.members[m].stat
		if m == chosen || !p.available(t, m) || !p.hasRoom(t, m) || float64(p.globalShare(o)) > bound {
			continue
		}
		if w := p.workAhead(o, x); w < ahead {
			best, ahead = m, w
		}
	}
	return best
}

// newKeyShareBound is the most recent share a member of set may have and
// still take a new key (byShare, coldPlacement): ShareSlack × the set's
// average, +1 so that the first decisions, when every share is a handful,
// do not place keys on noise.
func (p *Policy) newKeyShareBound(t *table, set []int) float64 {
	return p.tuning.ShareSlack*p.averageShare(t, set) + 1
}

// clearlyMore reports whether token work a is so far above b that the
// lighter side is worth a cold prefill: a is over TokenFloor and over
// TokenBalance × b. The token guard and all-busy overflow (staysHome) both
// ask this.
func (p *Policy) clearlyMore(a, b int64) bool {
	return a > p.tuning.TokenFloor && float64(a) > p.tuning.TokenBalance*float64(b)
}

// workAhead is the token work ahead of a request's first token on an
// instance: its token load plus what the request would prefill there.
func (p *Policy) workAhead(s *stat, x *expectation) int64 {
	return p.tokenLoad(s) + x.own(s.token)
}

func (p *Policy) averageShare(t *table, set []int) float64 {
	return float64(sumOver(t, set, p.globalShare)) / float64(len(set))
}

// guard applies the overload guard to a preference order (first = choice).
// The preferred instance is passed over when it is ejected, at the
// concurrency threshold (see overThreshold), or overloaded in tokens (over
// tokenCap). Over the threshold or ejected, the request walks the order to
// the first instance under the threshold and BalanceFactor × the average
// requests in flight, else goes to the least loaded. Overloaded in tokens,
// it walks to the first instance under the threshold and the token cap
// where it would clearly finish its prefill sooner (its load plus the
// prompt it would prefill there, cold, with the cache it loses counted
// twice (see spillCost), TokenBalance times below the preferred's load
// plus the little left to prefill there: a spill costs a cold copy of the
// prefix, worth it only for a real gain); if there is none it stays: token
// overload is a preference, the threshold a limit.
func (p *Policy) guard(t *table, order []int, x *expectation) ([]int, string) {
	first := order[0]
	switch {
	case !p.available(t, first):
		return p.spillByRequests(t, order, x, SpillUnhealthy)
	case p.overThreshold(t, first):
		return p.spillByRequests(t, order, x, SpillConcurrency)
	}
	limit := p.tokenCap(t, order)
	s := t.members[first].stat
	load := p.tokenLoad(s)
	if load <= limit {
		return order, SpillNone
	}
	// The work ahead here, from the load just read; it is over
	// TokenFloor, as load is over limit, so clearlyMore below asks only
	// for the ratio.
	home := x.own(s.token)
	stay := load + home
	for i, m := range order[1:] {
		o := t.members[m].stat
		l := p.tokenLoad(o)
		if p.available(t, m) && !p.overThreshold(t, m) && l <= limit && p.clearlyMore(stay, l+spillCost(x.own(o.token), home)) {
			return moveToFront(order, i+1), SpillTokens
		}
	}
	return order, SpillNone
}

// spillCost is the work a token spill is charged on the instance it would
// go to: the prompt it would prefill there (own), plus once more what of it
// the preferred instance would have found cached (own − home). The request
// waits for that cold prefill, and so does every request queued behind it
// there; and the fleet is saturated when token spills happen, so the
// prefill the spill adds is time taken from everyone. A prompt cold on both
// instances costs nothing more than its own prefill.
func spillCost(own, home int64) int64 {
	return own + max(own-home, 0)
}

// spillByRequests walks order past its first instance to the first one
// available, with room under the threshold (see hasRoom) and under
// BalanceFactor × the average requests in flight; failing that, to the
// first available one with room (an instance with room is never passed
// over for one without: the threshold is the limit, the balance cap a
// preference); if none, to the overflow's choice (see overflow).
func (p *Policy) spillByRequests(t *table, order []int, x *expectation, reason string) ([]int, string) {
	limit := capOf(p.tuning.BalanceFactor, sumOver(t, order, p.requests)+1, len(order))
	withRoom := -1 // the first with room, for when none is under the cap
	for i, m := range order[1:] {
		if !p.available(t, m) || !p.hasRoom(t, m) {
			continue
		}
		if p.requests(t.members[m].stat)+1 <= limit {
			return moveToFront(order, i+1), reason
		}
		if withRoom < 0 {
			withRoom = i + 1
		}
	}
	if withRoom > 0 {
		return moveToFront(order, withRoom), reason
	}
	best := p.overflow(t, order, x)
	if reason == SpillConcurrency {
		reason = SpillAllBusy
	}
	if best == 0 {
		return order, reason
	}
	return moveToFront(order, best), reason
}

// hasRoom reports whether a spill may go to an instance: it has at least
// spillRoom requests of room under the threshold.
func (p *Policy) hasRoom(t *table, m int) bool {
	threshold := int64(t.cfg.ConcurrencyThreshold)
	return p.requests(t.members[m].stat)+spillRoom(threshold) <= threshold
}

// spillRoom is how many requests of room under the threshold an instance
// needs to take a request whose own instance is at it: two (one under a
// threshold of 8). A spill costs a certain cold prefill; an instance with
// one request of room is full again at once, so its next requests spill
// too, and each spill sends one more prefix to be prefilled cold, while
// the request it takes would have waited only a little at home. Under
// bounded loads that cascade is the known weakness (arXiv:1908.08762); two
// requests of room stops most of it. Under a threshold of 8 one request is
// a large part of an instance's room, and with a threshold of 1 two could
// never be had, so there one request of room is enough.
func spillRoom(threshold int64) int64 {
	if threshold < 8 {
		return 1
	}
	return 2
}

// overflowSlack is how many more requests in flight than the least
// loaded an instance may have and still take an all-busy overflow.
const overflowSlack = 1

// overflowStay is how many more requests in flight than the least loaded
// the instance the key was placed on may have and still keep an all-busy
// request. Every instance then queues, and the placed one holds the
// prefix: the prefill it saves is worth more than a few requests more in
// its queue, which a continuously batching engine runs side by side (one
// more decoding request costs it DecodeTokens, a cached prefix of a few
// thousand tokens far more). Past spillRoom + 1 requests more, the queue
// itself is what the request waits for.
const overflowStay = 3

// overflow picks where a request goes when no instance has room under the
// threshold (see hasRoom): the instance the key was placed on, when
// staysHome says it does; otherwise, among the available instances with at
// most overflowSlack more requests in flight than the least loaded of
// them, the one where the request would see its first token soonest: the
// least token load plus the prompt it would have to prefill there, which
// favours an instance that holds its prefix. Counting requests alone sends
// overflow to whichever instance happens to have one fewer, cold for the
// prefix, though in a continuously batching engine one more running
// request delays a prefill far less than prefilling the whole prompt does.
func (p *Policy) overflow(t *table, order []int, x *expectation) int {
	var buf [64]int
	pool := buf[:0]
	for i, m := range order {
		if p.available(t, m) {
			pool = append(pool, i)
		}
	}
	if len(pool) == 0 {
		return p.leastLoaded(t, order)
	}
	least := int64(math.MaxInt64)
	for _, i := range pool {
		least = min(least, p.requests(t.members[order[i]].stat))
	}
	best, bestWork := -1, int64(0)
	for _, i := range pool {
		s := t.members[order[i]].stat
		if p.requests(s) > least+overflowSlack {
			continue
		}
		if work := p.workAhead(s, x); best < 0 || work < bestWork {
			best, bestWork = i, work
		}
	}
	if pool[0] == 0 && p.staysHome(t, order[0], least, bestWork, x) {
		return 0
	}
	return best
}

// staysHome reports whether an all-busy request stays on the instance m its
// key was placed on rather than going where work tokens are ahead of it
// (its own prefill there included), least being the fewest requests in
// flight it is compared with:
//
//   - within overflowStay of least, it stays unless it would see its first
//     token much sooner there: m's work ahead of it (see workAhead) is
//     clearly more than work (see clearlyMore);
//   - further above least, it leaves unless it would see its first token
//     much later there: work is clearly more than m's.
//
// Counting requests alone is not enough for the first rule: an instance
// prefilling a long document has no more requests than its neighbours, and
// a short chat queued behind that prefill waits for all of it. The second
// keeps a request for a long document cached on m from leaving for an
// instance with a few requests fewer, to prefill the whole document there
// cold, which costs it more than the queue it avoids and pushes the
// document's next requests out of one more instance's cache.
func (p *Policy) staysHome(t *table, m int, least, work int64, x *expectation) bool {
	s := t.members[m].stat
	home := p.workAhead(s, x)
	if p.requests(s) <= least+overflowStay {
		return !p.clearlyMore(home, work)
	}
	return p.clearlyMore(work, home)
}

// moveToFront moves order[i] to the front, keeping the rest in order, so
// that retries still follow the key's preference.
func moveToFront(order []int, i int) []int {
	v := order[i]
	copy(order[1:i+1], order[:i])
	order[0] = v
	return order
}
