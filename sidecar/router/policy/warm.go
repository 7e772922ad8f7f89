package policy

import (
	"slices"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// Warming (sidecar/README.md, "Warming joiners and leavers"): a request
// whose key is about to change owner is served where the key is warm, and
// the data plane sends its next owner a one-token copy, whose completion
// records the next owner as holding the key. Past a target's warmInFlight
// or warmBudget, the key moves cold.

const (
	// warmInFlight is how many warm copies a target may have in flight:
	// a copy is one prefill, and 4 prompts of about 2k tokens fill one
	// engine step under chunked prefill (vLLM's max_num_batched_tokens,
	// 8192, see tokenFloor), so warming takes at most about one step's
	// budget of an instance that also serves its own user requests.
	warmInFlight = 4
	// warmBudget is the prompt tokens a target is sent in warm copies per
	// event (a joiner's join; each drain for the others): 2^18, about half
	// the KV cache of a 7–8B model on an 80 GB GPU (~500k tokens); more
	// would evict what it warmed first.
	warmBudget = 1 << 18
)

// moveWarm is sticky's answer when a move is turned into a warm copy: the
// request stays where the key is warm.
const moveWarm = "warm"

// warmPlan is a warm copy a decision asks for: of the key to member, to
// be recorded there at version ver + 1 when the copy completes.
type warmPlan struct {
	member int
	ver    uint32
}

// warmMove is the outcome for a key warm on home whose next owner is
// target: stay home and warm the target when warming is on, both can serve
// and the target is within its bounds, else move to it cold (why).
func (v *view) warmMove(target, home int, why string) (int, string) {
	if v.noWarm || !v.available(target) || !v.available(home) || v.warmed(target) {
		return target, why
	}
	return home, moveWarm
}

// drainingHolder is the draining member that holds the key by the index
// entry e, outside allowed (which fails open to drainers) and allowed to
// serve model, with no member of set tied with it (that one holds the key
// as well and serves); -1 if none.
func (v *view) drainingHolder(set, allowed []int, e prefixindex.Entry, model string) int {
	for _, d := range v.Draining {
		m := v.Members[d]
		if m.Stat.Token != e.Tok[0] {
			continue
		}
		tied := e.Tie && slices.ContainsFunc(set, func(o int) bool { return v.Members[o].Stat.Token == e.Tok[1] })
		adapter := model != "" && model != v.Cfg.Model
		if tied || slices.Contains(allowed, d) || adapter && !slices.Contains(v.Cfg.Adapters[model], m.ID) {
			return -1
		}
		return d
	}
	return -1
}

// startDrains opens a new warm budget on every member that serves and is
// not joining (a joiner's covers its join) when an instance starts
// draining: its keys are about to be warmed on them.
func (p *Policy) startDrains(t, old *table) {
	if old == nil || !slices.ContainsFunc(t.Draining, func(d int) bool {
		i, ok := old.Index[t.Members[d].ID]
		return !ok || !old.Members[i].Draining
	}) {
		return
	}
	for _, m := range t.All {
		if s := t.Members[m].Stat; !joiningAt(s.Joined.Load(), p.shareEpoch.Load()) {
			s.WarmTokens.Store(0)
		}
	}
}

// recordWarm charges the warm copy to the target; its completion records
// the target as holding the key (from l, copied: the next decision reuses
// the buffers), so its next request moves there.
func (p *Policy) recordWarm(t *table, c *Choice, w *warmPlan, l learning) {
	if w == nil {
		return
	}
	s := t.Members[w.member].Stat
	// The share counts where the key is going: the fleet as it will be.
	c.stat().Share.Add(-1)
	s.Share.Add(1)
	s.WarmInFlight.Add(1)
	prompt, _, _ := c.Charge()
	s.WarmTokens.Add(prompt)
	l.hashes, l.depths = append([]uint64(nil), l.hashes...), append([]int(nil), l.depths...)
	l.token, l.ver, l.remember = s.Token, w.ver+1, true
	c.Warm = &warmCopy{member: w.member, Tokens: prompt, Settle: func(ok bool) {
		p.pick.Lock()
		defer p.pick.Unlock()
		s.WarmInFlight.Add(-1)
		if ok {
			p.index.AddDepths(l.hashes, l.depths, l.token, l.ver)
		}
	}}
}
