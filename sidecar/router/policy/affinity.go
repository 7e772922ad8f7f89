package policy

import (
	"math"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// Affinity places the anchor within its parent set, before the guard
// (sidecar/README.md, "How PREFIX_AWARE decides", steps 2–4).

// placementChoices is how far down a new key's order placement may go:
// the "power of two choices", which balances nearly as well as looking
// everywhere while confining each key (and its cached prefix) to two
// instances however often it moves.
const placementChoices = 2

// stickySlack is the absolute slack, in decisions, of the bound a known
// key moves over, max(moveSlack × average, average + stickySlack): a count
// of n decisions varies by about √n (8 at 64), so the first few hundred
// decisions do not move keys on noise; moveSlack takes over past
// stickySlack / (moveSlack − 1) = 100 decisions per instance.
const stickySlack = 8

// place chooses the anchor's instance in its parent set (or the draining
// member that holds it), the placement's version (the entry's own when the
// key stays, one more when it goes elsewhere), why a known key moved, and
// the member the request warms (-1: none; when moved is moveWarm).
func (p *Policy) place(t *table, w walk, allowed []int, model string) (int, uint32, string, int) {
	var ver uint32
	if w.choices == placementChoices {
		if d, e := p.index.Deepest(w.hashes, w.leaf); d >= 0 {
			ver = e.Ver
			m, moved := p.sticky(t, w.parent, e)
			warm := w.parent[0]
			if dr := p.drainingHolder(t, w.parent, allowed, e, model); dr >= 0 {
				warm, moved = p.nextOwner(t, w.parent, m, moved)
				m, moved = p.warmMove(t, warm, dr, moved)
			}
			if m >= 0 {
				switch moved {
				case moveWarm:
					return m, ver, moved, warm
				case MoveNone:
				default:
					ver++
				}
				return m, ver, moved, -1
			}
		}
	}
	return p.byShare(t, w.parent, w.choices), ver + 1, MoveNone, -1
}

// nextOwner is where a key a draining member holds goes with the drainer
// gone, from sticky's answer without it (m, moved), and why that is a
// move: the member sticky keeps it on (a former holder), or the joiner it
// would warm from there, or a new placement when none holds it.
func (p *Policy) nextOwner(t *table, set []int, m int, moved string) (int, string) {
	switch {
	case moved == moveWarm:
		return set[0], MoveJoining
	case m < 0:
		return p.byShare(t, set, placementChoices), MoveHolderLeft
	case moved == MoveNone:
		return m, MoveHolderLeft
	}
	return m, moved
}

// sticky returns the member of set the index says holds the key (-1 if
// none), and why that is a move: its current holder (tied: the earlier in
// the key's order), else its former one (MoveHolderLeft); its first choice
// while that one joins (MoveJoining: only the keys plain rendezvous would
// move); off a holder over the move bound (MoveShare, see relieve).
func (p *Policy) sticky(t *table, set []int, e prefixindex.Entry) (int, string) {
	home, moved := -1, MoveNone
	for _, m := range set {
		if tok := t.Members[m].Stat.Token; tok == e.Tok[0] || e.Tie && tok == e.Tok[1] {
			home = m
			break
		}
	}
	for _, m := range set {
		if home < 0 && e.Tok[1] != 0 && t.Members[m].Stat.Token == e.Tok[1] {
			home, moved = m, MoveHolderLeft
		}
	}
	if home < 0 || p.tuning.ShareSlack < 0 {
		return home, moved
	}
	avg := p.averageShare(t, set)
	if first := t.Members[set[0]].Stat; set[0] != home && p.joining(first) && float64(first.Share.Load()) <= p.tuning.ShareSlack*avg {
		return p.warmMove(t, set[0], home, MoveJoining)
	}
	if float64(t.Members[home].Stat.Share.Load()) <= max(moveSlack*avg, avg+stickySlack) {
		return home, moved
	}
	if m := p.relieve(t, set, home, avg); m != home {
		return m, MoveShare
	}
	return home, moved
}

// relieve is where a key living on the over-share member m goes: the
// least-shared of its placementChoices members within ShareSlack of the
// average, or m itself when none is (a move onto another busy instance
// costs a cold prefill and balances nothing).
func (p *Policy) relieve(t *table, set []int, m int, avg float64) int {
	best := m
	for _, c := range set[:min(len(set), placementChoices)] {
		share := t.Members[c].Stat.Share.Load()
		if c != m && float64(share) <= p.tuning.ShareSlack*avg && (best == m || share < t.Members[best].Stat.Share.Load()) {
			best = c
		}
	}
	return best
}

// byShare places a new key: the first of the choices first members of set
// within the new-key share bound, else the one of them with the smallest
// share.
func (p *Policy) byShare(t *table, set []int, choices int) int {
	if p.tuning.ShareSlack < 0 || len(set) == 1 {
		return set[0]
	}
	bound := p.newKeyShareBound(t, set)
	best := set[0]
	for _, m := range set[:min(len(set), choices)] {
		share := t.Members[m].Stat.Share.Load()
		if float64(share) <= bound {
			return m
		}
		if share < t.Members[best].Stat.Share.Load() {
			best = m
		}
	}
	return best
}

// coldPlacement moves a new long key (see longAndCold) from chosen to the
// member of set with room and within the share bound where it costs least
// (ties stay earlier): no cache holds it on chosen, and where it is
// prefilled is where its next requests go. A short key's prefill is too
// small to queue behind.
func (p *Policy) coldPlacement(t *table, set []int, chosen int, x *prefixindex.Match) int {
	if len(set) < 2 {
		return chosen
	}
	if _, long := p.longAndCold(x, t.Members[chosen].Stat); !long {
		return chosen
	}
	bound := math.Inf(1)
	if p.tuning.ShareSlack >= 0 {
		bound = p.newKeyShareBound(t, set)
	}
	best, c := p.cheapest(t, set, x, func(m int) bool {
		return m != chosen && p.available(t, m) && p.hasRoom(t, m) && float64(t.Members[m].Stat.Share.Load()) <= bound
	})
	if best < 0 || c >= p.cost(t.Members[chosen].Stat, x) {
		return chosen
	}
	return best
}

// newKeyShareBound is the most recent share a member of set may have and
// still take a new key: ShareSlack × the set's average, +1 so that the
// first decisions, when every share is a handful, do not place keys on
// noise.
func (p *Policy) newKeyShareBound(t *table, set []int) float64 {
	return p.tuning.ShareSlack*p.averageShare(t, set) + 1
}

func (p *Policy) averageShare(t *table, set []int) float64 {
	return float64(sumOver(t, set, func(s *counters) int64 { return s.Share.Load() })) / float64(len(set))
}
