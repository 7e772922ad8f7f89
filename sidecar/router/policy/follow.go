package policy

import "github.com/warmroute/warmroute/sidecar/router/fleet"

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
	return fleet.Follow(t.Table, order, prompt, prefill, prefilled, d)
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
	order := fleet.Rank(t.Table, allowed, key.WindowHash(t.Cfg.HashSeed), nil)
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
	prompt := p.tokensOf(key.PromptBytes)
	d := Decision{Strategy: t.Cfg.Strategy, Spill: SpillFallback}
	return fleet.NewChoice(t.Table, moveToFront(order, best), fleet.Unranked{}, prompt, prompt, false, d), nil
}
