package policy

// A replica that is not the elected picker keeps a policy of its own to
// count its own requests (Follow) and to decide alone while no picker
// answers (Fallback).

// Follow charges a decision made elsewhere to this policy's counts, as a
// Choice from Pick would: prompt and prefill are the tokens the decider
// charged, prefilled says the first token has already come (an adopted
// request). IDs this policy does not know are left out; none known is
// ErrNoInstance.
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

// Fallback decides alone while no elected picker answers: rendezvous
// hashing of the window's hash, the first instance in that order available
// and under the threshold by this replica's own counts, else the least
// loaded. Deterministic, so every replica places a key alike meanwhile; it
// learns nothing. An instance may hold up to the threshold from each
// replica while it lasts.
func (p *Policy) Fallback(key Key) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	order := rank(t, allowed, key.WindowHash(t.cfg.HashSeed), nil)
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
// current one first, at most limit of them (all when limit ≤ 0): what the
// picker answers a replica.
func (c *Choice) Order(limit int) []string {
	order := c.order[c.pos:]
	if limit > 0 && len(order) > limit {
		order = order[:limit]
	}
	if c.pos+len(order) > len(c.order)-c.unranked.n {
		c.unranked.rank(c.t, c.order)
	}
	out := make([]string, 0, len(order))
	for _, m := range order {
		out = append(out, c.t.members[m].ID)
	}
	return out
}

// Charge is what the choice charges its current instance: the prompt, the
// prefill still expected of it, and whether the first token came.
func (c *Choice) Charge() (prompt, prefill int64, prefilled bool) {
	return c.prompt, c.prefill, c.prefilled.Load()
}
