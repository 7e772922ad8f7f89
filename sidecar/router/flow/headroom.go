package flow

import (
	"math"
	"time"
)

// Headroom (docs/flow-control.md#headroom). A running request cannot be
// preempted, so a tenant is served as if alone only if it finds a slot free
// when it arrives. A request may therefore not take the last slots that the
// tenants coming before it recently needed at once: a higher priority, or at
// its own priority a lighter tenant while its own is over its share.

// windowHolds is how far back a tenant's demand (running plus queued) is
// remembered, in the time a request holds its slot: its peak over one to two
// windows is the headroom kept for it, its mean over the last whole window
// says whether it is within its share. Five hold a steady tenant's bursts
// (two do not, in the simulation) and give a stopped tenant's headroom back
// within ten.
const windowHolds = 5

// defaultHold is the time a request holds its slot until one has ended.
const defaultHold = 2 * time.Second

// demand is one flow's recent demand. Guarded by Controller.mu.
type demand struct {
	running  int       // slots its requests hold
	at       time.Time // when running+queued last changed
	area     float64   // ∫ (running+queued) dt over the window so far
	peak     int       // most running+queued at once in the window
	lastPeak int       // the previous window's
	lastMean float64   // the previous window's mean; -1: no whole window yet
}

func (f *flow) now() int { return f.d.running + f.queued }

// noteLocked accounts the flow's demand up to now, before it changes.
func (c *Controller) noteLocked(f *flow, now time.Time) {
	if !f.d.at.IsZero() {
		f.d.area += float64(f.now()) * now.Sub(f.d.at).Seconds()
	}
	f.d.at = now
}

// changed records the flow's demand after it changed.
func (f *flow) changed() { f.d.peak = max(f.d.peak, f.now()) }

// rollLocked starts a new window when the current one is over.
func (c *Controller) rollLocked(now time.Time) {
	if c.window.IsZero() {
		c.window = now
	}
	span, window := now.Sub(c.window), c.demandWindow()
	if span < window {
		return
	}
	for _, f := range c.flows {
		c.noteLocked(f, now)
		f.d.lastPeak, f.d.lastMean = f.d.peak, f.d.area/span.Seconds()
		if span >= 2*window {
			// Idle for a whole window: nothing of the one before is recent.
			f.d.lastPeak, f.d.lastMean = f.now(), float64(f.now())
		}
		f.d.peak, f.d.area = f.now(), 0
	}
	c.window = now
}

// mean is the flow's recent mean demand: the last whole window's, or the
// current one's so far.
func (c *Controller) mean(f *flow, now time.Time) float64 {
	if f.d.lastMean >= 0 {
		return f.d.lastMean
	}
	if s := now.Sub(c.window).Seconds(); s > 0 {
		return (f.d.area + float64(f.now())*now.Sub(f.d.at).Seconds()) / s
	}
	return float64(f.now())
}

// mayTakeLocked says whether a request of f at priority prio may take a
// slot now, leaving the headroom owed to the flows that come before it.
func (c *Controller) mayTakeLocked(f *flow, prio int, now time.Time) bool {
	if c.capacity == 0 || c.running == 0 {
		return true // capacity unknown, or an idle fleet: serve whoever asks
	}
	c.rollLocked(now)
	active, over := 0.0, false
	for _, g := range c.flows {
		if max(g.d.peak, g.d.lastPeak) > 0 {
			active += g.weight
		}
	}
	fMean := c.mean(f, now)
	if active > 0 {
		over = fMean > float64(c.capacity)*f.weight/active
	}
	reserve := 0
	for _, g := range c.flows {
		if g == f {
			continue
		}
		// A peak seen over a window or two understates the next one's; a
		// margin of its square root (about one standard deviation of a
		// Poisson count) holds it.
		peak := max(g.d.peak, g.d.lastPeak)
		owed := peak + int(math.Ceil(math.Sqrt(float64(peak)))) - g.d.running
		if owed <= 0 {
			continue
		}
		// At one priority, a tenant within its share is kept from nothing:
		// with nothing running it may always take a slot.
		if g.prio > prio || g.prio == prio && over && f.d.running > 0 && c.mean(g, now)/g.weight < fMean/f.weight {
			reserve += owed
		}
	}
	return c.capacity-c.running-1 >= reserve
}

// SetCapacity says how many requests the fleet runs at once (its
// instances' thresholds summed), for the headroom.
func (c *Controller) SetCapacity(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.capacity = n
}

// MayPlace says whether a request of tenant at priority prio may be
// placed now rather than queued: no queued request may go first, and it
// leaves the headroom owed to the others. Placed, it is Started; not
// placed, it Waits.
func (c *Controller) MayPlace(tenant string, prio int) bool {
	e := c.snap.Load().lookup(tenant)
	fl, prio := e.fl, min(prio, e.lim.Priority)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	c.releaseLocked(c.free(), now, c.mayTake(now))
	return c.q.next(c.mayTake(now)) == nil && c.mayTakeLocked(fl, prio, now)
}

// Recheck releases the queued requests that the headroom held back and now
// lets go, the peaks it kept room for having passed. No slot need free for
// that, so the picker calls it on every heartbeat.
func (c *Controller) Recheck() {
	if c.waiting.Load() == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	c.releaseLocked(c.free(), now, c.mayTake(now))
}

// Start counts a placed request as running on its tenant's slots until
// its ticket is settled.
func (c *Controller) Start(t *Ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked(t, c.clock())
}

func (c *Controller) startLocked(t *Ticket, now time.Time) {
	if t == nil || t.running {
		return
	}
	c.noteLocked(t.e.fl, now)
	t.running, t.started = true, now
	t.e.fl.d.running++
	c.running++
	t.e.fl.changed()
}

func (c *Controller) stopLocked(t *Ticket, now time.Time) {
	if t == nil || !t.running {
		return
	}
	// A moving average over about ten requests, as drain's.
	c.hold = 0.9*c.hold + 0.1*now.Sub(t.started).Seconds()
	c.noteLocked(t.e.fl, now)
	t.running = false
	t.e.fl.d.running--
	c.running--
}

// demandWindow is windowHolds of the time requests have held their slots
// lately, at least a second.
func (c *Controller) demandWindow() time.Duration {
	return max(time.Duration(windowHolds*c.hold*float64(time.Second)), time.Second)
}
