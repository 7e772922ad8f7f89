package policy

import (
	"math"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// placementChoices is how far down a new key's order placement may go:
// the "power of two choices", which balances nearly as well as looking
// everywhere while confining each key (and its cached prefix) to two
// instances.
const placementChoices = 2

// placement is where affinity puts a request's key, within its parent
// set, before the guard.
type placement struct {
	member int
	// ver is the index entry's version to record: the entry's own when
	// the key stays, one more when it goes elsewhere.
	ver uint32
	// moved is why a known key left its holder (a Move reason), or
	// moveWarm: it stays on member and warms next, its next owner.
	moved string
	next  int
}

// place chooses the anchor's member in its parent set, or the draining
// member that holds it while its next owner is warmed.
func (p *Policy) place(v *view, w walk, allowed []int, model string) placement {
	var ver uint32
	if w.choices == placementChoices {
		if d, e := p.index.Deepest(w.hashes, w.leaf); d >= 0 {
			ver = e.Ver
			m, moved := v.sticky(w.parent, e)
			next := w.parent[0]
			if dr := v.drainingHolder(w.parent, allowed, e, model); dr >= 0 {
				next, moved = v.nextOwner(w.parent, m, moved)
				m, moved = v.warmMove(next, dr, moved)
			}
			if m >= 0 {
				if moved != MoveNone && moved != moveWarm {
					ver++
				}
				return placement{member: m, ver: ver, moved: moved, next: next}
			}
		}
	}
	return placement{member: v.byShare(w.parent, w.choices), ver: ver + 1, moved: MoveNone}
}

// nextOwner is where a key a draining member holds goes with the drainer
// gone, from sticky's answer without it (m, moved), and why that is a
// move.
func (v *view) nextOwner(set []int, m int, moved string) (int, string) {
	switch {
	case moved == moveWarm:
		return set[0], MoveJoining
	case m < 0:
		return v.byShare(set, placementChoices), MoveHolderLeft
	case moved == MoveNone:
		return m, MoveHolderLeft
	}
	return m, moved
}

// sticky returns the member of set the index says holds the key (-1 if
// none), and why that is a move (sidecar/README.md's rules 2–5).
func (v *view) sticky(set []int, e prefixindex.Entry) (int, string) {
	home, moved := -1, MoveNone
	for _, m := range set {
		if tok := v.Members[m].Stat.Token; tok == e.Tok[0] || e.Tie && tok == e.Tok[1] {
			home = m
			break
		}
	}
	for _, m := range set {
		if home < 0 && e.Tok[1] != 0 && v.Members[m].Stat.Token == e.Tok[1] {
			home, moved = m, MoveHolderLeft
		}
	}
	if home < 0 || v.shareSlack < 0 {
		return home, moved
	}
	avg := v.average(set, v.share)
	if first := set[0]; first != home && v.joining(first) && float64(v.share(first)) <= v.shareSlack*avg {
		return v.warmMove(first, home, MoveJoining)
	}
	if float64(v.share(home)) <= max(moveSlack*avg, avg+stickySlack) {
		return home, moved
	}
	if m := v.relieve(set, home, avg); m != home {
		return m, MoveShare
	}
	return home, moved
}

// stickySlack is the absolute slack, in decisions, of the bound a known
// key moves over, max(moveSlack × average, average + stickySlack): a count
// of n decisions varies by about √n (8 at 64), so the first few hundred
// decisions do not move keys on noise.
const stickySlack = 8

// relieve is where a key living on the over-share member m goes: the
// least-shared of its placementChoices members within ShareSlack of the
// average, or m itself when none is (a move onto another busy instance
// costs a cold prefill and balances nothing).
func (v *view) relieve(set []int, m int, avg float64) int {
	best := m
	for _, c := range set[:min(len(set), placementChoices)] {
		if c != m && float64(v.share(c)) <= v.shareSlack*avg && (best == m || v.share(c) < v.share(best)) {
			best = c
		}
	}
	return best
}

// byShare places a new key: the first of set's first choices members
// within the new-key share bound, else the least shared of them.
func (v *view) byShare(set []int, choices int) int {
	if v.shareSlack < 0 || len(set) == 1 {
		return set[0]
	}
	bound := v.newKeyShareBound(set)
	best := set[0]
	for _, m := range set[:min(len(set), choices)] {
		if float64(v.share(m)) <= bound {
			return m
		}
		if v.share(m) < v.share(best) {
			best = m
		}
	}
	return best
}

// coldPlacement moves a new long key (see longAndCold) from chosen to the
// member of set with room and within the share bound where it costs least
// (ties stay earlier): no cache holds it on chosen, and where it is
// prefilled is where its next requests go.
func (v *view) coldPlacement(set []int, chosen int) int {
	if len(set) < 2 {
		return chosen
	}
	if _, long := v.longAndCold(chosen); !long {
		return chosen
	}
	bound := math.Inf(1)
	if v.shareSlack >= 0 {
		bound = v.newKeyShareBound(set)
	}
	best, c := v.cheapest(set, func(m int) bool {
		return m != chosen && v.available(m) && v.hasRoom(m) && float64(v.share(m)) <= bound
	})
	if best < 0 || c >= v.cost(chosen) {
		return chosen
	}
	return best
}

// newKeyShareBound is the most recent share a member of set may have and
// still take a new key: ShareSlack × the set's average, +1 so that the
// first decisions, when every share is a handful, do not place keys on
// noise.
func (v *view) newKeyShareBound(set []int) float64 {
	return v.shareSlack*v.average(set, v.share) + 1
}
