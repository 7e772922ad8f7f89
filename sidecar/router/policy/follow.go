package policy

import "slices"

// Follow charges a decision made by the elected picker to this replica's
// own counts (see followOrder).
func (p *Policy) Follow(order []string, prompt, prefill int64, prefilled bool, d Decision) (*Choice, error) {
	if t := p.table.Load(); t != nil {
		return followOrder(t, order, prompt, prefill, prefilled, d)
	}
	return nil, ErrNoInstance
}

// SpillFallback marks a decision made by Fallback.
const SpillFallback = "fallback"

// Fallback decides alone while no elected picker answers: the first
// instance of the window hash's rendezvous order available and under the
// threshold by this replica's counts, else the least loaded. Every replica
// places a key alike meanwhile, each up to the threshold; it learns nothing.
func (p *Policy) Fallback(key Key) (*Choice, error) {
	p.pick.Lock()
	defer p.pick.Unlock()
	t, allowed, err := p.allowed(key.Model)
	if err != nil {
		return nil, err
	}
	v := p.look(t)
	order := rank(t, allowed, key.WindowHash(t.Cfg.HashSeed), nil)
	best := slices.IndexFunc(order, func(m int) bool { return v.available(m) && !v.full(m) })
	if best < 0 {
		best = v.leastLoaded(order)
	}
	prompt := p.tokensOf(key.PromptBytes)
	d := Decision{Strategy: t.Cfg.Strategy, Spill: SpillFallback}
	return newChoice(t, moveToFront(order, best), unrankedTail{}, prompt, prompt, false, d), nil
}
