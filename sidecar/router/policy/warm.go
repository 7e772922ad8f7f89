package policy

// Warming a joiner: while an instance joins, a key the joining rule would
// move to it cold (MoveJoining, a full prefill on the user's request) is
// instead served at home, where its prefix is warm, and the Choice names
// the joiner as its warm target. The data plane sends the joiner a
// one-token copy of the request; when the copy completes (Warmed) the
// placement is recorded for the joiner, one version past home's, so the
// key's next request moves there with its prefix cached. The hottest keys
// come back first, so they are warmed first. Warming ends with the joining
// period, and its cost is bounded per joiner by warmInFlight and
// warmBudget; past either, the joining rule moves keys cold as before.

const (
	// warmInFlight is how many warm copies a joiner may have in flight:
	// a copy is one prefill, and 4 prompts of about 2k tokens fill one
	// engine step under chunked prefill (vLLM's max_num_batched_tokens,
	// 8192, see tokenFloor), so warming takes at most about one step's
	// budget of a joiner that also serves its first user requests.
	warmInFlight = 4
	// warmBudget is the prompt tokens a joiner is sent in warm copies per
	// join: 2^18 = 262,144, about half the KV cache of a 7–8B model on an
	// 80 GB GPU (~65 GB at 128 KiB a token ≈ 500k tokens); warming more
	// would evict what it warmed first, and the rest is left for the
	// joiner's own traffic.
	warmBudget = 1 << 18
)

// moveWarm is sticky's answer when a joining move is turned into a warm
// copy: the request stays home. Never seen outside the package.
const moveWarm = "warm"

// joinMove is the joining rule's outcome for a key living on home whose
// first choice, joiner, is joining: stay home and warm the joiner while
// warming is on and within its bounds, else move to it cold.
func (p *Policy) joinMove(t *table, joiner, home int) (int, string) {
	s := t.members[joiner].stat
	if p.tuning.NoWarm || !p.available(t, joiner) || s.warmInFlight.Load() >= warmInFlight || s.warmTokens.Load() >= warmBudget {
		return joiner, MoveJoining
	}
	return home, moveWarm
}

// warmTarget is the member a decision warms (-1: none): the key's first
// choice when place answered moveWarm and the request stayed where it was
// placed (a spilled request is not home, and does not warm).
func warmTarget(w walk, moved, spill string) int {
	if moved != moveWarm || spill != SpillNone {
		return -1
	}
	return w.parent[0]
}

// warm is a Choice's warm copy: the joiner and what recording its
// placement teaches the index (its own copy of the hashes, the policy's
// buffers being reused by the next decision).
type warm struct {
	p      *Policy
	member int
	tokens int64
	learning
	settled bool
}

// recordWarm charges the warm copy to the joiner (in flight, budget) and
// keeps what its completion records.
func (p *Policy) recordWarm(t *table, c *Choice, target int, l learning, ver uint32) {
	if target < 0 {
		return
	}
	s := t.members[target].stat
	// The request's share counts where its key is going: served at home
	// only until the joiner is warm, it would otherwise raise home's
	// share past the move bound and send home's other keys off cold
	// (MoveShare), the very cost warming saves.
	c.stat().share.Add(-1)
	s.share.Add(1)
	s.warmInFlight.Add(1)
	s.warmTokens.Add(c.prompt)
	l.hashes, l.depths = append([]uint64(nil), l.hashes...), append([]int(nil), l.depths...)
	l.token, l.ver, l.remember = s.token, ver+1, true
	c.warm = &warm{p: p, member: target, tokens: c.prompt, learning: l}
}

// WarmTarget is the joining instance to send a one-token copy of the
// request to, and the prompt tokens it is charged; false when none.
func (c *Choice) WarmTarget() (Instance, int64, bool) {
	if c.warm == nil {
		return Instance{}, 0, false
	}
	return c.t.members[c.warm.member].Instance, c.warm.tokens, true
}

// Warmed settles the warm copy: its in-flight slot is released and, when
// ok (the joiner answered it), the index records the joiner as holding
// the key, so its next request moves there warm. Only the first call
// counts.
func (c *Choice) Warmed(ok bool) {
	w := c.warm
	if w == nil {
		return
	}
	w.p.pick.Lock()
	defer w.p.pick.Unlock()
	if w.settled {
		return
	}
	w.settled = true
	c.t.members[w.member].stat.warmInFlight.Add(-1)
	if ok {
		w.p.index.addDepths(w.hashes, w.depths, w.token, w.ver)
	}
}
