package policy

import (
	"slices"
	"time"
)

// Eject keeps an instance the transport found failing out of new
// decisions until the deadline, unless every candidate is ejected: the
// policy then fails open rather than refuse traffic over a blip.
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
	out := slices.DeleteFunc(slices.Clone(set), func(m int) bool { return t.Members[m].Stat.EjectedUntil.Load() > now })
	if len(out) == 0 {
		return slices.Clone(set)
	}
	return out
}

// available reports whether an instance is not ejected.
func (p *Policy) available(t *table, i int) bool {
	return t.Members[i].Stat.EjectedUntil.Load() <= p.tuning.Now().UnixNano()
}
