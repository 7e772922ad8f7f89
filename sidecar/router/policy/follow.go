package policy

// A router replica that is not the elected picker keeps a policy of its own
// all the same, with the routing document in force, for two things: to
// count its own requests (Follow), which its metrics report, and to decide
// alone while no picker answers (Fallback).

// Follow charges a decision made elsewhere to this policy's counts: the
// request goes to order[0], then along the rest of order after connection
// failures, as a Choice from Pick would. prompt and prefill are the tokens
// the decider charged (prefill: the prompt less its expected cache hit);
// prefilled says the first token has already come (an adopted request, see
// the picker's ledger). IDs this policy does not know are left out; none
// known is ErrNoInstance.
func (p *Policy) Follow(order []string, prompt, prefill int64, prefilled bool, d Decision) (*Choice, error) {
	t := p.table.Load()
	if t == nil {
		return nil, ErrNoInstance
	}
	c := &Choice{t: t, prompt: prompt, prefill: prefill, Decision: d}
	for _, id := range order {
		if i, ok := t.index[id]; ok {
			c.order = append(c.order, i)
		}
	}
	if len(c.order) == 0 {
		return nil, ErrNoInstance
	}
	c.prefilled.Store(prefilled)
	c.charge()
	return c, nil
}

// SpillFallback marks a decision made by Fallback.
const SpillFallback = "fallback"

// Fallback decides alone, for the while no elected picker answers (it
// died, or a new one is being elected): rendezvous hashing of the window's
// hash over the instances allowed, the first in that order that is
// available and under the concurrency threshold by this policy's own
// counts, else the least loaded. It is deterministic, so every replica
// places a key alike and the key's cache stays where it was put in the
// meantime, and it learns nothing. Each replica counts only its own
// requests here: while it lasts, an instance may hold up to the threshold
// from each replica.
func (p *Policy) Fallback(key Key) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	order := rank(t, allowed, key.windowHash(t.cfg.HashSeed), nil)
	c := &Choice{t: t, order: order, Decision: Decision{Strategy: t.cfg.Strategy, Spill: SpillFallback}}
	best := -1
	for i, m := range order {
		if p.available(t, m) && !p.overThreshold(t, m) {
			best = i
			break
		}
	}
	if best < 0 {
		best = p.leastLoaded(t, order)
	}
	moveToFront(order, best)
	c.prompt = p.tokensOf(key.PromptBytes)
	c.prefill = c.prompt
	c.charge()
	return c, nil
}

// Order is the instances of the choice in the order they are tried, the
// current one first: what the picker answers a replica.
func (c *Choice) Order() []string {
	out := make([]string, 0, len(c.order)-c.pos)
	for _, m := range c.order[c.pos:] {
		out = append(out, c.t.members[m].ID)
	}
	return out
}

// Charge is what the choice charges its current instance: the prompt, the
// prefill still expected of it, and whether the first token came.
func (c *Choice) Charge() (prompt, prefill int64, prefilled bool) {
	return c.prompt, c.prefill, c.prefilled.Load()
}
