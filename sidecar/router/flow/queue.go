package flow

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reason says why a request was refused.
type Reason string

// The reasons, each with its HTTP status (Reason.Status).
const (
	ReasonRequests        Reason = "requests"          // over its requests per minute (429)
	ReasonTokens          Reason = "tokens"            // over its tokens per minute (429)
	ReasonTenantQueueFull Reason = "tenant_queue_full" // its tenant has maxQueued queued (429)
	ReasonNotQueued       Reason = "not_queued"        // the fleet is full, and its maxQueued 0 (503)
	ReasonPressure        Reason = "pressure"          // the queue over all tenants was full; it ranked lowest (503)
	ReasonDeadline        Reason = "deadline"          // it waited its deadline out (503)
)

// Status is the HTTP status a request refused for r is answered with: 429
// when the tenant is over its own limits, 503 when the endpoint is.
func (r Reason) Status() int {
	switch r {
	case ReasonRequests, ReasonTokens, ReasonTenantQueueFull:
		return 429
	}
	return 503
}

// ErrRetry is Wait's answer when capacity freed since the caller last
// looked for room: it looks again rather than waits.
var ErrRetry = errors.New("capacity freed since the request looked for room: try again")

// Refusal is Wait's answer for a request it did not release.
type Refusal struct {
	Reason Reason
	// Tenant is the entry the request was counted under (DefaultName for
	// tenants not listed).
	Tenant string
	// RetryAfter is the time the queue would take to drain at its recent
	// pace, at least a second and at most the queue timeout.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	switch r.Reason {
	case ReasonTenantQueueFull:
		return fmt.Sprintf("too many requests queued for tenant %q; retry after %v", r.Tenant, r.RetryAfter)
	case ReasonNotQueued:
		return fmt.Sprintf("the endpoint is at capacity and tenant %q is not queued; retry after %v", r.Tenant, r.RetryAfter)
	case ReasonPressure:
		return fmt.Sprintf("the endpoint's queue is full; retry after %v", r.RetryAfter)
	case ReasonDeadline:
		return fmt.Sprintf("the endpoint stayed at capacity for the request's whole queue timeout; retry after %v", r.RetryAfter)
	}
	return fmt.Sprintf("refused (%s); retry after %v", r.Reason, r.RetryAfter)
}

// Queued is a request that found no instance with room.
type Queued struct {
	Tenant string
	// Priority is the request's own (Clamp); Wait clamps it again.
	Priority int
	// Tokens is the request's estimate, its cost to its tenant's share.
	Tokens int64
	// Epoch is Controller.Epoch read before the placement that failed.
	Epoch int64
	// Ticket is the request's, counted as Started when it is released.
	Ticket *Ticket
}

// Epoch changes whenever capacity frees that no queued request takes; a
// request reads it before trying to place, and passes it to Wait.
func (c *Controller) Epoch() int64 { return c.epoch.Load() }

// Waiting is the number of queued requests (and, for a moment, one
// arriving).
func (c *Controller) Waiting() int { return int(c.waiting.Load()) }

// Wait queues a request until capacity frees for it, it waits QueueTimeout
// out or is shed (a Refusal), or ctx ends (ctx.Err()). On nil the caller
// places the request at once, even over an instance's threshold if another
// took the room in between: it waited its turn. Wait answers ErrRetry at
// once when capacity freed since the caller read req.Epoch: the caller reads
// the epoch again and tries to place the request before it waits.
func (c *Controller) Wait(ctx context.Context, req Queued) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	w, now, err := c.arriveLocked(req)
	c.mu.Unlock()
	if w == nil {
		return err
	}

	timer := time.NewTimer(w.deadline.Sub(now))
	defer timer.Stop()
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return c.leave(w, ctx.Err())
	case <-timer.C:
		return c.leave(w, nil)
	}
}

// arriveLocked queues req, or answers it at once: ErrRetry (the epoch
// moved), or a Refusal.
func (c *Controller) arriveLocked(req Queued) (*waiter, time.Time, error) {
	// Counted before the epoch is read, the reverse of Freed.
	c.waiting.Add(1)
	if c.epoch.Load() != req.Epoch {
		c.waiting.Add(-1)
		return nil, time.Time{}, ErrRetry
	}
	now := c.clock()
	e := c.snap.Load().lookup(req.Tenant)
	w := &waiter{tenant: req.Tenant, fl: e.fl, prio: min(req.Priority, e.lim.Priority), tokens: max(req.Tokens, 0),
		deadline: now.Add(c.cfg.QueueTimeout), ticket: req.Ticket, done: make(chan struct{})}
	var refused *Refusal
	if !w.deadline.After(now) {
		refused = c.refusalLocked(ReasonDeadline, e.fl)
	} else {
		refused = c.enqueueLocked(w, now)
	}
	if refused != nil {
		c.waiting.Add(-1)
		return nil, now, refused
	}
	return w, now, nil
}

// leave answers a waiter whose client went (gone) or whose timer fired
// (gone nil), unless it was answered in the meantime.
func (c *Controller) leave(w *waiter, gone error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	switch {
	case w.resolved && w.err == nil && gone != nil:
		// Released as its client left: the capacity is the next one's.
		c.stopLocked(w.ticket, now)
		if c.releaseLocked(1, now, c.mayTake(now)) == 0 {
			c.epoch.Add(1)
		}
		return gone
	case w.resolved:
		return w.err
	case gone == nil:
		c.shedLocked(w, ReasonDeadline)
		return w.err
	}
	c.dequeueLocked(w, now)
	c.resolve(w, gone)
	return gone
}

// Freed says that n requests' worth of capacity freed: the next n queued
// requests that may take it (mayTakeLocked) are released to place
// themselves. With nobody queued it takes no lock.
func (c *Controller) Freed(n int) {
	if n <= 0 {
		return
	}
	// Epoch moved before waiting is read, the reverse of Wait: either Wait
	// sees the new epoch or this sees its request counted.
	if c.waiting.Load() == 0 {
		c.epoch.Add(1)
		if c.waiting.Load() == 0 {
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	if c.releaseLocked(max(n, c.free()), now, c.mayTake(now)) < n {
		c.epoch.Add(1)
	}
}

// free is how many slots the fleet has free by the requests Started: what
// may be released when the headroom kept some waiting while others freed.
func (c *Controller) free() int {
	if c.capacity == 0 {
		return 0
	}
	return c.capacity - c.running
}

// mayTake is mayTakeLocked for a queued request, for releaseLocked.
func (c *Controller) mayTake(now time.Time) func(*waiter) bool {
	return func(w *waiter) bool { return c.mayTakeLocked(w.fl, w.prio, now) }
}

// enqueueLocked queues w, or refuses it; to make room under the bound over
// all tenants it sheds whichever ranks lowest, w included.
func (c *Controller) enqueueLocked(w *waiter, now time.Time) *Refusal {
	c.expireLocked(now)
	fl := w.fl
	if fl.queued >= fl.maxQueued {
		return c.refusalLocked(fl.full(), fl)
	}
	if fl.queued == 0 {
		fl.vt = max(fl.vt, c.vnow)
	}
	c.seq++
	w.seq, w.enqueued = c.seq, now
	c.noteLocked(fl, now)
	c.q.push(w)
	fl.changed()
	if c.q.n > c.cfg.MaxQueued {
		if v := c.q.victim(nil); v != w {
			c.shedLocked(v, ReasonPressure)
		} else {
			c.q.remove(w)
			return c.refusalLocked(ReasonPressure, fl)
		}
	}
	return nil
}

// releaseLocked releases up to n queued requests that ok takes (nil: any)
// in order, counts them running and charges each to its flow's virtual
// time; it returns how many it released.
func (c *Controller) releaseLocked(n int, now time.Time, ok func(*waiter) bool) int {
	c.expireLocked(now)
	released := 0
	for ; released < n; released++ {
		w := c.q.next(ok)
		if w == nil {
			break
		}
		c.dequeueLocked(w, now)
		c.startLocked(w.ticket, now)
		c.vnow = max(c.vnow, w.fl.vt)
		w.fl.vt += float64(max(w.tokens, 1)) / w.fl.weight
		w.fl.m.wait.Observe(now.Sub(w.enqueued).Seconds())
		if !c.lastOut.IsZero() {
			// A moving average over about ten releases: recent enough to
			// follow the fleet's pace, long enough to ride out one burst.
			c.drain = 0.9*c.drain + 0.1*now.Sub(c.lastOut).Seconds()
		}
		c.lastOut = now
		c.resolve(w, nil)
	}
	return released
}

func (c *Controller) expireLocked(now time.Time) {
	for _, w := range c.q.expired(now) {
		c.shedLocked(w, ReasonDeadline)
	}
}

func (c *Controller) dequeueLocked(w *waiter, now time.Time) {
	c.noteLocked(w.fl, now)
	c.q.remove(w)
	c.waiting.Add(-1)
}

// shedLocked takes a queued request out and answers it r.
func (c *Controller) shedLocked(w *waiter, r Reason) {
	c.dequeueLocked(w, c.clock())
	c.resolve(w, c.refusalLocked(r, w.fl))
}

func (c *Controller) resolve(w *waiter, err error) {
	w.err, w.resolved = err, true
	close(w.done)
}

// refusalLocked answers a request of fl refused for r, and counts it.
func (c *Controller) refusalLocked(r Reason, fl *flow) *Refusal {
	fl.m.shed.WithLabelValues(string(r)).Inc()
	retry := time.Duration(float64(c.q.n) * c.drain * float64(time.Second))
	if c.lastOut.IsZero() {
		retry = c.cfg.QueueTimeout // nothing released yet: no pace to go by
	}
	return &Refusal{Reason: r, Tenant: fl.name, RetryAfter: min(max(retry, time.Second), max(c.cfg.QueueTimeout, time.Second))}
}

// requeueLocked places every queued request again under s: its tenant's
// entry now (Default for a tenant removed), its priority clamped to the
// entry's, and sheds what is over the new bounds.
func (c *Controller) requeueLocked(s *snapshot, now time.Time) {
	ws := c.q.all()
	c.q = order{}
	for _, fl := range c.flows {
		fl.queued, fl.queuedTokens = 0, 0
		fl.m.queued.Set(0)
	}
	for _, w := range ws {
		e := s.lookup(w.tenant)
		if e.fl.queued == 0 && e.fl != w.fl {
			e.fl.vt = max(e.fl.vt, c.vnow)
		}
		w.fl, w.prio = e.fl, min(w.prio, e.lim.Priority)
		c.q.push(w)
	}
	for _, w := range ws {
		for fl := w.fl; fl.queued > fl.maxQueued; {
			c.shedLocked(c.q.victim(fl), fl.full())
		}
	}
	for c.q.n > c.cfg.MaxQueued {
		c.shedLocked(c.q.victim(nil), ReasonPressure)
	}
	c.expireLocked(now)
}
