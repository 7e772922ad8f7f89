package proxy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/picker"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Holding: while no instance can serve a request (none yet, all starting,
// all ejected) the router keeps it instead of answering 503, and sends it
// on once an instance can take it (waitsForInstance says which requests).
// A model load takes minutes; a client that retries on 503 meanwhile gets
// nothing better than a request kept in order here.
//
// Held requests are retried in arrival order, one at a time: each retry is
// a pick, which counts the request against its instance at once, so the
// requests released by one instance becoming ready are spread by the
// policy's concurrency threshold like any others, oldest first.

// Defaults of the hold options (the router's flags show the same).
const (
	// DefaultMaxHeld bounds the requests held at once; past it a request
	// gets 503 with Retry-After. Held bodies have their own bound (half
	// the buffer budget); this one bounds what every held request keeps
	// besides its body, its client connection (4 KiB read and 4 KiB write
	// buffers) and handler goroutine: 1024 is twenty times the scale-
	// from-zero target's 50 requests arriving during one model load, for
	// about 8 MiB of connection buffers.
	DefaultMaxHeld = 1024
	// DefaultHoldTimeout fits a model load of minutes (a 70B model's
	// weights pulled and loaded onto GPUs take 3 to 8 minutes).
	DefaultHoldTimeout = 10 * time.Minute
)

// holdRetryInterval is how often held requests are retried besides the
// wake-ups on a new routing document or a readmitted instance: an ejection
// running out, or the leader's view changing, says nothing to this
// replica. A quarter second adds at most that to a wait of minutes (a
// model load), and costs four picks a second while requests are held,
// since a pass stops at the first request that finds no instance.
const holdRetryInterval = 250 * time.Millisecond

// holder is the queue of held requests.
type holder struct {
	mu      sync.Mutex
	waiters []*waiter
	bytes   int64
	// passing: a retry pass runs; again: a wake-up arrived during it.
	passing, again bool
	stop           chan struct{} // ends retryHeld once the queue is empty
	seq            uint64        // arrivals so far
	// dispatched, if set, sees each waiter as a pass dispatches it (tests).
	dispatched func(seq uint64)
}

type waiter struct {
	key   policy.Key
	from  picker.Sender
	seq   uint64
	bytes int64
	ctx   context.Context
	// done receives the pick once one succeeds (buffered, never blocks).
	done chan *picker.Ticket
}

var (
	errHoldFull    = errors.New("hold queue full")
	errHoldTimeout = errors.New("held past the wait limit")
)

// waitsForInstance reports whether a request for model that found no
// instance would be served by one coming up, and so asks for one (OnHold)
// and is held: a request for the base model, or for any model while the
// fleet has no instance at all (scaled to zero: adapters load with their
// instance). An adapter with no instance while the fleet has some is one
// whose load failed or runs (its status says which): it keeps its 503,
// since waiting would not mend a failed load.
func waitsForInstance(st *state, model string) bool {
	return model == "" || model == st.doc.Model || len(st.doc.Instances) == 0
}

// hold keeps a request that found no instance until a pick succeeds, the
// wait limit passes (errHoldTimeout), the client leaves (its context's
// error) or the queue is full (errHoldFull). bodyBytes is the request's
// buffered body, which is already in the buffer budget; held bodies may
// take at most half of it, so requests held through a long load cannot
// starve the requests served once instances are back.
func (r *Router) hold(ctx context.Context, key policy.Key, from picker.Sender, bodyBytes int64) (*picker.Ticket, error) {
	h := &r.holder
	w := &waiter{key: key, from: from, bytes: bodyBytes, ctx: ctx, done: make(chan *picker.Ticket, 1)}
	h.mu.Lock()
	if len(h.waiters) >= r.opts.MaxHeld || h.bytes+bodyBytes > r.opts.MaxBufferedBytes/2 {
		h.mu.Unlock()
		return nil, errHoldFull
	}
	first := len(h.waiters) == 0
	w.seq = h.seq
	h.seq++
	h.waiters = append(h.waiters, w)
	h.bytes += bodyBytes
	if first {
		h.stop = make(chan struct{})
		go r.retryHeld(h.stop)
	}
	h.mu.Unlock()
	if first {
		// The first held request of a run asks for an instance; the rest
		// wait for the same one.
		r.opts.Metrics.Activations.Inc()
	}
	if r.opts.OnHold != nil {
		r.opts.OnHold() // every held request: the callee rate-limits
	}
	start := time.Now()
	timer := time.NewTimer(r.opts.HoldTimeout)
	defer timer.Stop()
	var t *picker.Ticket
	var err error
	select {
	case t = <-w.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = errHoldTimeout
	}
	if err != nil && !r.unhold(w) {
		// A pass dispatched it as we gave up: the ticket is ours to end.
		if t = <-w.done; t != nil {
			t.Drop()
		}
	}
	r.opts.Metrics.HoldWait.Observe(time.Since(start).Seconds())
	return t, err
}

// unhold removes a waiter still queued, reporting whether it was.
func (r *Router) unhold(w *waiter) bool {
	h := &r.holder
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.Index(h.waiters, w)
	if i < 0 {
		return false
	}
	h.bytes -= w.bytes
	h.waiters = slices.Delete(h.waiters, i, i+1)
	if len(h.waiters) == 0 && h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
	return true
}

// heldCount is how many requests are held at the moment.
func (r *Router) heldCount() int {
	r.holder.mu.Lock()
	defer r.holder.mu.Unlock()
	return len(r.holder.waiters)
}

// retryHeld retries the held requests on a period until none is left.
func (r *Router) retryHeld(stop chan struct{}) {
	t := time.NewTicker(holdRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.wakeHeld()
		}
	}
}

// wakeHeld starts a retry pass over the held requests, or asks the running
// one for another round; Apply and readmissions call it.
func (r *Router) wakeHeld() {
	h := &r.holder
	h.mu.Lock()
	if len(h.waiters) == 0 {
		h.mu.Unlock()
		return
	}
	if h.passing {
		h.again = true
		h.mu.Unlock()
		return
	}
	h.passing = true
	h.mu.Unlock()
	go r.pass()
}

// pass picks for each held request in arrival order. All are for the
// base model, so the first that finds no instance ends the round: those
// behind it would find none either, and with a picker elsewhere each pick
// is a call to it.
func (r *Router) pass() {
	h := &r.holder
	for {
		h.mu.Lock()
		snapshot := append([]*waiter(nil), h.waiters...)
		h.again = false
		h.mu.Unlock()
	round:
		for _, w := range snapshot {
			if w.ctx.Err() != nil {
				continue // leaving by itself
			}
			t, err := r.inRotation(r.picker.Pick(w.ctx, w.key, w.from))
			if err != nil {
				if errors.Is(err, policy.ErrNoInstance) {
					break round
				}
				continue // the client left: its own wait ends it
			}
			if !r.unhold(w) {
				t.Drop() // it gave up meanwhile
				continue
			}
			if h.dispatched != nil {
				h.dispatched(w.seq)
			}
			w.done <- t
		}
		h.mu.Lock()
		if !h.again || len(h.waiters) == 0 {
			h.passing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// inRotation passes on a pick whose instance is in rotation, and ends one
// whose instance is ejected, answering policy.ErrNoInstance: with every
// candidate ejected the policy fails open and names an ejected one, which
// a router that holds requests waits out instead (the periodic retry finds
// the instance once its back-off ends or a health check readmits it), and
// a gateway is refused (see Admit).
func (r *Router) inRotation(t *picker.Ticket, err error) (*picker.Ticket, error) {
	if err == nil && !r.own.Healthy(t.Instance().ID) {
		t.Drop()
		return nil, policy.ErrNoInstance
	}
	return t, err
}
