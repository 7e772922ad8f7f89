package policy

import "slices"

// seedShares starts instances that joined a running fleet at the others'
// average share (a share is a decayed count of recent decisions) and marks
// them joining. At zero, a newcomer would take up to twice its fair part
// of the keys for as long as the counts remember; seeded, it takes those
// whose first choice it is (see sticky), as plain rendezvous would.
func (p *Policy) seedShares(t *table, joined []*counters) {
	if len(joined) == 0 || len(joined) == len(t.Members) {
		return
	}
	var share, n int64
	for _, m := range t.Members {
		if !slices.Contains(joined, m.Stat) && !m.Draining {
			share += m.Stat.Share.Load()
			n++
		}
	}
	if n == 0 {
		return
	}
	epoch := p.shareEpoch.Load()
	for _, s := range joined {
		s.Share.Store(share / n)
		s.Joined.Store(epoch + 1)
		s.WarmTokens.Store(0)
	}
}

// joiningAt reports whether an instance that joined in share epoch
// joined - 1 (0: from the start) is joining at epoch: in this decay cycle
// or the last, long enough for the keys whose first choice it is to come
// back once.
func joiningAt(joined, epoch int64) bool { return joined > 0 && epoch < joined+1 }

// countShare adds a decision to the chosen instance's decayed share.
func (p *Policy) countShare(t *table, chosen int) {
	t.Members[chosen].Stat.Share.Add(1)
	if p.shareSince.Add(1) >= p.tuning.DecayEvery {
		p.shareSince.Store(0)
		for _, m := range t.Members {
			m.Stat.Share.Store(m.Stat.Share.Load() / 2)
		}
		p.shareEpoch.Add(1)
	}
}
