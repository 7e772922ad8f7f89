package flow

import (
	"cmp"
	"slices"
	"time"
)

// flow is one tenant's (or Default's) place in the queue, kept across
// configuration updates by name. Guarded by Controller.mu.
type flow struct {
	name      string
	weight    float64
	prio      int // its tenant's, for the headroom
	maxQueued int
	lm        *limiter // nil: no rate limit
	m         *tenantMetrics
	d         demand
	// vt is the flow's virtual time: the weighted service in tokens it has
	// had, and so the start tag of its next request (start-time fair
	// queuing). A flow that becomes backlogged starts no earlier than the
	// controller's virtual time, so idle tenants bank no credit.
	vt           float64
	queued       int
	queuedTokens int64
}

// full is why a request of f is refused when f has its maxQueued queued.
func (f *flow) full() Reason {
	if f.maxQueued == 0 {
		return ReasonNotQueued
	}
	return ReasonTenantQueueFull
}

// overShare is how far the flow is over its weighted share of the queue:
// its queued tokens per unit of weight.
func (f *flow) overShare() float64 { return float64(f.queuedTokens) / f.weight }

// waiter is one queued request.
type waiter struct {
	tenant   string // as the request named it, to place it again on Update
	fl       *flow
	prio     int
	tokens   int64
	deadline time.Time
	enqueued time.Time
	seq      uint64
	fq       *flowQueue // where it is while queued
	ticket   *Ticket    // nil in tests of the queue alone

	done     chan struct{} // closed once err is its outcome
	err      error
	resolved bool
}

// byDeadline orders one flow queue: earliest deadline, then first come.
func byDeadline(a, b *waiter) int {
	return cmp.Or(a.deadline.Compare(b.deadline), cmp.Compare(a.seq, b.seq))
}

// flowQueue is one flow's requests of one priority, by deadline. Deadlines
// are mostly arrival + QueueTimeout, so arrivals append at the end and
// releases take from the front.
type flowQueue struct {
	fl   *flow
	band *band
	ws   []*waiter
}

func (q *flowQueue) insert(w *waiter) {
	i, _ := slices.BinarySearchFunc(q.ws, w, byDeadline)
	q.ws = slices.Insert(q.ws, i, w)
}

func (q *flowQueue) remove(w *waiter) {
	i, _ := slices.BinarySearchFunc(q.ws, w, byDeadline)
	if i == 0 {
		q.ws[0] = nil
		q.ws = q.ws[1:]
		return
	}
	q.ws = slices.Delete(q.ws, i, i+1)
}

// band is one priority's flow queues.
type band struct {
	prio   int
	queues []*flowQueue
}

// order is the queue: bands by priority, highest first.
type order struct {
	bands []*band
	n     int
}

func (o *order) push(w *waiter) {
	i, found := slices.BinarySearchFunc(o.bands, w.prio, func(b *band, prio int) int { return cmp.Compare(prio, b.prio) })
	if !found {
		o.bands = slices.Insert(o.bands, i, &band{prio: w.prio})
	}
	b := o.bands[i]
	j := slices.IndexFunc(b.queues, func(q *flowQueue) bool { return q.fl == w.fl })
	if j < 0 {
		j = len(b.queues)
		b.queues = append(b.queues, &flowQueue{fl: w.fl, band: b})
	}
	fq := b.queues[j]
	fq.insert(w)
	w.fq = fq
	o.n++
	w.fl.queued++
	w.fl.queuedTokens += w.tokens
	w.fl.m.queued.Set(float64(w.fl.queued))
}

func (o *order) remove(w *waiter) {
	fq := w.fq
	fq.remove(w)
	w.fq = nil
	o.n--
	w.fl.queued--
	w.fl.queuedTokens -= w.tokens
	w.fl.m.queued.Set(float64(w.fl.queued))
	if len(fq.ws) > 0 {
		return
	}
	b := fq.band
	b.queues = slices.DeleteFunc(b.queues, func(q *flowQueue) bool { return q == fq })
	if len(b.queues) == 0 {
		o.bands = slices.DeleteFunc(o.bands, func(x *band) bool { return x == b })
	}
}

// next is the request to serve among those ok takes (nil: any; ok judges
// a flow's priority by its first request): the highest priority, then the
// flow with the least weighted service (the earlier arrival between
// equals), then the earliest deadline.
func (o *order) next(ok func(*waiter) bool) *waiter {
	for _, b := range o.bands {
		var best *flowQueue
		for _, q := range b.queues {
			if best != nil && (q.fl.vt > best.fl.vt || q.fl.vt == best.fl.vt && q.ws[0].seq > best.ws[0].seq) {
				continue
			}
			if ok == nil || ok(q.ws[0]) {
				best = q
			}
		}
		if best != nil {
			return best.ws[0]
		}
	}
	return nil
}

// victim is the request to shed first, of flow only if not nil: the lowest
// priority, then the flow furthest over its weighted share, then the latest
// deadline.
func (o *order) victim(only *flow) *waiter {
	for i := len(o.bands) - 1; i >= 0; i-- {
		var worst *flowQueue
		for _, q := range o.bands[i].queues {
			if only != nil && q.fl != only {
				continue
			}
			if worst == nil || cmp.Or(cmp.Compare(q.fl.overShare(), worst.fl.overShare()), cmp.Compare(q.fl.name, worst.fl.name)) > 0 {
				worst = q
			}
		}
		if worst != nil {
			return worst.ws[len(worst.ws)-1]
		}
	}
	return nil
}

// expired lists the requests whose deadline is not after now.
func (o *order) expired(now time.Time) []*waiter {
	var out []*waiter
	for _, b := range o.bands {
		for _, q := range b.queues {
			for _, w := range q.ws {
				if w.deadline.After(now) {
					break
				}
				out = append(out, w)
			}
		}
	}
	return out
}

// all lists the queued requests in arrival order.
func (o *order) all() []*waiter {
	out := make([]*waiter, 0, o.n)
	for _, b := range o.bands {
		for _, q := range b.queues {
			out = append(out, q.ws...)
		}
	}
	slices.SortFunc(out, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	return out
}
