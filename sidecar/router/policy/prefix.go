package policy

import (
	"math"
	"slices"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// PrefixAware sends requests that share a prompt prefix to the instance
// that holds it, within the load guard.
const PrefixAware = routing.StrategyPrefixAware

// walk is what the replica-set walk learnt of a request.
type walk struct {
	hashes  []uint64
	parent  []int // the set the anchor was placed in, in the anchor's order
	choices int   // how far down parent placement may go
	// leaf is the anchor's depth; shared is how many leading blocks are
	// popular (likely cached on any instance of their set).
	leaf, shared int
}

// prefixAware decides in three steps (sidecar/README.md, "How PREFIX_AWARE
// decides"): the replica-set walk finds the anchor's parent set, affinity
// places it there, and the guard moves the request off when it must or the
// cost model says it clearly should.
func prefixAware(p *Policy, v *view, key Key, allowed []int) decision {
	var sbuf [32]int
	w := p.replicaSets(v.table, key, allowed, sbuf[:0], p.parent[:0])
	p.parent = w.parent[:0]
	if key.HoldsText() {
		p.chain = w.hashes[:0] // maybe grown: keep it
	}
	return p.decideWalk(v, key, allowed, w, fallbackOrder)
}

// decideWalk places the anchor after the walk w and guards the placement,
// with the fallback order given by order (tests pass a reference one).
func (p *Policy) decideWalk(v *view, key Key, allowed []int, w walk, order func(*table, []int, walk, int) ([]int, unrankedTail)) decision {
	depths := prefixindex.RecordDepths(p.depths[:0], w.leaf, len(w.hashes))
	p.depths = depths[:0]
	v.x = p.expect(key, v.BlockSize, w, depths)
	pl := p.place(v, w, allowed, key.Model)
	warming := pl.moved == moveWarm
	chosen := pl.member
	if !warming {
		chosen = v.coldPlacement(w.parent, pl.member)
	}
	d := decision{placed: chosen}
	d.AnchorDepth, d.ColdPlaced = int32(w.leaf), chosen != pl.member
	if warming && v.Members[chosen].Draining {
		// Served by a drainer that holds the key: the key's next owner
		// comes second, the first a spill goes to.
		d.order, d.unranked = order(v.table, allowed, w, pl.next)
		d.order = slices.Insert(d.order, 0, chosen)
	} else {
		d.order, d.unranked = order(v.table, allowed, w, chosen)
	}
	d.order, d.Spill = v.guard(d.order, &d.unranked)

	tok := v.Members[d.order[0]].Stat.Token
	d.MatchChars = v.x.HitBytes(tok, d.Spill == SpillNone)
	d.hit = v.x.HitFraction(tok, d.Spill == SpillNone)
	// A spill is not remembered, so that the key returns home, where its
	// cache is, once the overload is over; unless home never had it (see
	// longAndCold): the prompt then lives only where it went.
	_, coldAtHome := v.longAndCold(chosen)
	d.learning = learning{hashes: w.hashes, depths: depths, token: tok, ver: pl.ver,
		remember: d.Spill == SpillNone || coldAtHome}
	if warming && d.Spill == SpillNone { // spilled, it is not where the key is warm
		d.warm = &warmPlan{member: pl.next, ver: pl.ver}
	}
	if d.remember && !warming {
		d.Moved = pl.moved
	}
	return d
}

// learning is what recording a PREFIX_AWARE decision teaches the policy.
type learning struct {
	hashes   []uint64
	depths   []int
	token    uint32
	ver      uint32
	remember bool
}

// learn records the popularity of every block the request carried and,
// when its placement is remembered, the index entries at its depths.
func (p *Policy) learn(l *learning) {
	if l.hashes == nil {
		return
	}
	p.pop.Record(l.hashes)
	if l.remember {
		p.index.AddDepths(l.hashes, l.depths, l.token, l.ver)
	}
}

// popularityPrior is added to the request count when turning sketch counts
// into fractions, so that a router's first few requests are not each taken
// for a dominant prefix: with 32, one every request carries counts as half
// the traffic after 32 requests, and the prior weighs under 1 % of the
// decayed count (about 8k, see defaultDecayEvery).
const popularityPrior = 32

// replicaSets walks the block chain. A block carried by a fraction f of
// recent requests keeps r = ⌈f × N / ReplicaLoad⌉ instances, its HRW
// winners within the set so far; the first block that keeps one is the
// anchor, placed within its parent set (sbuf holds the set once it
// shrinks). The lookahead is read only when every window block keeps the
// whole set: a system prompt longer than the window.
func (p *Policy) replicaSets(t *table, key Key, allowed []int, sbuf, pbuf []int) walk {
	hashes := key.Window(p.chain[:0])
	if len(hashes) == 0 {
		hashes = []uint64{scopeSeed(t.Cfg.HashSeed, key.Model, "")}
	}
	total := float64(p.pop.Total()) + popularityPrior
	n := float64(len(allowed))
	set := allowed
	w := walk{leaf: -1, choices: placementChoices, hashes: hashes}
	read := false
	for i := 0; ; i++ {
		if i == len(w.hashes) {
			if read {
				break
			}
			// The whole lookahead at once, so that its blocks' popularity
			// is learnt together, not one block per generation of requests.
			w.hashes, read = key.WithLookahead(w.hashes), true
			if i == len(w.hashes) {
				break
			}
		}
		h := w.hashes[i]
		est := p.pop.Estimate(h)
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

// fallbackOrder is the order to try instances in: chosen, the rest of the
// parent set (warm for the shared part) in the anchor's order, then
// everyone else in the same key's order, left unranked until read.
func fallbackOrder(t *table, allowed []int, w walk, chosen int) ([]int, unrankedTail) {
	order := append(make([]int, 0, len(allowed)), chosen)
	for _, m := range w.parent {
		if m != chosen {
			order = append(order, m)
		}
	}
	if len(w.parent) == len(allowed) {
		return order, unrankedTail{}
	}
	var bits [16]uint64 // the parent set, 1,024 members without allocating
	in := bits[:]
	if words := (len(t.Members) + 63) / 64; words > len(bits) {
		in = make([]uint64, words)
	}
	for _, m := range w.parent {
		in[m/64] |= 1 << (m % 64)
	}
	ranked := len(order)
	for _, m := range allowed {
		if in[m/64]&(1<<(m%64)) == 0 {
			order = append(order, m)
		}
	}
	return order, unrankedTail{N: len(order) - ranked, Key: w.hashes[w.leaf]}
}
