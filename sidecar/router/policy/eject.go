package policy

import "time"

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
