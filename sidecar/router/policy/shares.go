package policy

import (
	"slices"
)

// Shares are each instance's decayed count of recent decisions: what
// placement balances new keys by and moves known keys off (see sticky).

// seedShares starts instances that joined a running fleet at the average
// share of the others and marks them joining. At zero, a newcomer would sit
// far below the average for as long as the counts remember, and take up to
// twice its fair part of the keys; seeded, it takes the keys whose first
// choice it is (see sticky): those plain rendezvous hashing would move.
func (p *Policy) seedShares(t *table, joined []*stat) {
	if len(joined) == 0 || len(joined) == len(t.members) {
		return
	}
	// The average of the members that serve: a draining one's share
	// only fades.
	var share, n int64
	for _, m := range t.members {
		if !slices.Contains(joined, m.stat) && !m.Draining {
			share += m.stat.share.Load()
			n++
		}
	}
	if n == 0 {
		return
	}
	epoch := p.shareEpoch.Load()
	for _, s := range joined {
		s.share.Store(share / n)
		s.joined.Store(epoch + 1)
		s.warmTokens.Store(0)
	}
}

// joining reports whether the instance joined the fleet recently: in the
// share decay cycle it joined in or the next one, so for DecayEvery to
// twice that decisions, long enough for the keys that are its first choice
// to come back once.
func (p *Policy) joining(s *stat) bool {
	j := s.joined.Load()
	return j > 0 && p.shareEpoch.Load() < j+1
}

// countShare adds a decision to the chosen instance's decayed share.
func (p *Policy) countShare(t *table, chosen int) {
	t.members[chosen].stat.share.Add(1)
	if p.shareSince.Add(1) >= p.tuning.DecayEvery && p.shareDecay.CompareAndSwap(false, true) {
		p.shareSince.Store(0)
		for _, m := range t.members {
			m.stat.share.Store(m.stat.share.Load() / 2)
		}
		p.shareEpoch.Add(1)
		p.shareDecay.Store(false)
	}
}
