package policy

import "slices"

// Follow charges a decision made by the elected picker to this replica's
// own counts, as newChoice would: IDs the table does not know are left
// out; none known is ErrNoInstance.
func (p *Policy) Follow(ids []string, prompt, prefill int64, prefilled bool, d Decision) (*Choice, error) {
	t := p.table.Load()
	if t == nil {
		return nil, ErrNoInstance
	}
	var order []int
	for _, id := range ids {
		if i, ok := t.Index[id]; ok {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return nil, ErrNoInstance
	}
	return newChoice(t, order, unrankedTail{}, prompt, prefill, prefilled, d), nil
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
