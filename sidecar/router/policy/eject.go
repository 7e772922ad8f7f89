package policy

import (
	"time"
)

// Health: instances the transport found failing are ejected from new
// decisions for a while; the policy fails open when every candidate is.

// Eject keeps an instance out of new decisions until the deadline, unless
// every candidate is ejected (then the policy fails open rather than refuse
// traffic because of a blip).
func (p *Policy) Eject(id string, until time.Time) {
	p.stats.Get(id).EjectedUntil.Store(until.UnixNano())
}

// Readmit ends an ejection early (a health check passed).
func (p *Policy) Readmit(id string) { p.stats.Get(id).EjectedUntil.Store(0) }

// Healthy reports whether an instance is currently not ejected.
func (p *Policy) Healthy(id string) bool {
	return p.stats.Get(id).EjectedUntil.Load() <= p.tuning.Now().UnixNano()
}

// healthy drops ejected instances, failing open when none is left.
func (p *Policy) healthy(t *table, set []int) []int {
	now := p.tuning.Now().UnixNano()
	out := make([]int, 0, len(set))
	for _, i := range set {
		if t.Members[i].Stat.EjectedUntil.Load() <= now {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return append(out, set...)
	}
	return out
}

// available reports whether an instance is not ejected.
func (p *Policy) available(t *table, i int) bool {
	return t.Members[i].Stat.EjectedUntil.Load() <= p.tuning.Now().UnixNano()
}
