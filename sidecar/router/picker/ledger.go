package picker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// ledger is the elected picker's state for one term: the policy that
// decides for every router replica of the endpoint, and the requests in
// flight it counts, by replica and the replica's sequence number. Its
// epoch is random per term, so that a replica can tell a new picker (one
// that does not know its requests yet) from the one it has been asking.
type ledger struct {
	epoch  uint64
	policy *policy.Policy
	flow   *flow.Controller
	tries  int // Options.Tries
	// started is when the term began; warm is set once the old leader's
	// state was restored (see receive).
	started time.Time
	warm    bool

	mu      sync.Mutex
	expired time.Time // when expire last ran
	tickets map[ticketKey]*policy.Choice
	// dropped remembers, for ticketTTL, the requests a replica said were
	// done before their pick arrived: a pick call that timed out on the
	// replica (which then routed the request by its fallback and said so)
	// may still reach the picker, and must not be counted.
	dropped map[ticketKey]time.Time
	// seen is when each replica last called; the requests of a replica
	// silent for longer than ticketTTL are released (it died, or lost the
	// picker: it will adopt them again into whichever picker it finds).
	seen map[string]time.Time
	// warms are the decisions whose warm copy a replica has yet to report
	// (eventWarmed): a copy may outlive its request.
	warms map[ticketKey]*policy.Choice
	// admitted are flow control's rate-limit tickets, settled at the end.
	admitted map[ticketKey]*flow.Ticket
}

type ticketKey struct {
	replica string
	seq     uint64
}

// ticketTTL is how long a replica may stay silent before the picker drops
// the requests it counts for it: replicas with requests in flight call at
// least every heartbeatEvery, so ten missed heartbeats mean it is gone.
const ticketTTL = 10 * heartbeatEvery

func newLedger(t policy.Tuning, cfg *policy.Config, fc flow.Config, fm *flow.Metrics, tries int) (*ledger, error) {
	l := &ledger{epoch: rand.Uint64() | 1, policy: policy.New(t), flow: flow.New(fc, time.Now), tries: tries, started: time.Now(), expired: time.Now(),
		tickets: map[ticketKey]*policy.Choice{}, dropped: map[ticketKey]time.Time{}, seen: map[string]time.Time{}, warms: map[ticketKey]*policy.Choice{},
		admitted: map[ticketKey]*flow.Ticket{}}
	l.flow.Instrument(fm)
	if cfg != nil {
		if err := l.policy.Update(*cfg); err != nil {
			return nil, err
		}
		l.resized()
	}
	return l, nil
}

// resized tells flow control the fleet's capacity after the policy's
// configuration changed, and returns the room the fleet has now.
func (l *ledger) resized() int {
	room, capacity := l.policy.Room()
	l.flow.SetCapacity(capacity)
	return room
}

// pick decides another replica's request and counts it until it is done.
func (l *ledger) pick(ctx context.Context, replica string, req pickRequest, now time.Time) (answer, error) {
	c, err := l.decide(ctx, replica, req, now, false)
	if err != nil {
		return answer{}, err
	}
	prompt, prefill, _ := c.Charge()
	a := answer{Epoch: l.epoch, Order: c.Order(l.tries), Prompt: prompt, Prefill: prefill, Decision: c.Decision}
	if in, tokens, ok := c.WarmTarget(); ok {
		a.Warm, a.WarmTokens = in.ID, tokens
	}
	return a, nil
}

// decide makes and counts the decision of a replica's request. The
// leader's own replica (local) holds the Choice as its ticket and settles
// its warm copy on it; another replica's copy is settled by eventWarmed.
func (l *ledger) decide(ctx context.Context, replica string, req pickRequest, now time.Time, local bool) (*policy.Choice, error) {
	l.apply(replica, req.Events, now)
	c, err := l.admit(ctx, replica, req, local)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[replica] = now
	k := ticketKey{replica, req.Seq}
	if _, gone := l.dropped[k]; gone {
		// The replica gave up waiting and already said so: the request
		// went elsewhere, and is adopted there.
		l.end(k, c, 0)
		c.Warmed(false)
		delete(l.dropped, k)
		return c, nil
	}
	if _, _, ok := c.WarmTarget(); ok && !local {
		l.warms[k] = c
	}
	if old, ok := l.tickets[k]; ok {
		old.Done() // a replica never reuses a number; a restarted one might
		l.flow.Freed(1)
	}
	l.tickets[k] = c
	return c, nil
}

// apply applies a replica's events in order. Every decision and every
// call passes here, so this is where silent replicas expire: whoever the
// picker is (elected or fixed), counts are never older than ticketTTL at
// the moment they decide something.
func (l *ledger) apply(replica string, evs []event, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.expired) >= heartbeatEvery {
		l.expire(now)
		l.flow.Recheck()
	}
	l.seen[replica] = now
	for _, e := range evs {
		k := ticketKey{replica, e.Seq}
		c, ok := l.tickets[k]
		switch e.Kind {
		case eventAdopt:
			if ok {
				continue
			}
			// A request decided by another picker, or by the replica's
			// fallback: counted here from now on, so the threshold holds
			// again right after a failover.
			if c, err := l.policy.Follow(e.Order, e.Prompt, e.Prefill, e.Prefilled, policy.Decision{}); err == nil {
				l.tickets[k] = c
			}
		case eventDone:
			if ok {
				l.end(k, c, e.Tokens)
			} else {
				l.settleLocked(k, 0)
				l.dropped[k] = now
			}
		case eventPrefilled:
			if ok {
				c.Prefilled()
			}
		case eventNext:
			if ok && c.Instance().ID != e.Instance {
				c.Next()
			}
		case eventWarmed:
			if w, ok := l.warms[k]; ok {
				w.Warmed(e.OK)
				delete(l.warms, k)
			}
		}
	}
}

// acceptHandoffFor is how long into its term a picker takes its
// predecessor's state: the old leader pushes it as soon as it sees the
// Lease taken, within a second or two; later, the new leader has learnt
// enough of its own that an old picture would overwrite it.
const acceptHandoffFor = 10 * time.Second

// receive restores the old leader's state into a young term, once.
func (l *ledger) receive(snap []byte, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.warm || now.Sub(l.started) > acceptHandoffFor {
		return errors.New("handoff refused: this term already has its predecessor's state, or is too old for it")
	}
	if err := l.policy.Restore(snap); err != nil {
		return err
	}
	l.warm = true
	return nil
}

// expire releases the requests of replicas silent for over ticketTTL.
// Called with l.mu held.
func (l *ledger) expire(now time.Time) {
	l.expired = now
	for k, at := range l.dropped {
		if now.Sub(at) > ticketTTL {
			delete(l.dropped, k)
		}
	}
	for r, at := range l.seen {
		if now.Sub(at) <= ticketTTL {
			continue
		}
		delete(l.seen, r)
		for k, c := range l.tickets {
			if k.replica == r {
				l.end(k, c, flow.Unknown)
			}
		}
		for k := range l.admitted {
			if k.replica == r {
				l.settleLocked(k, flow.Unknown)
			}
		}
		for k, c := range l.warms {
			if k.replica == r {
				c.Warmed(false)
				delete(l.warms, k)
			}
		}
	}
}

// end releases a request that ended, having used tokens: its instance,
// its rate limits, and its place for a queued request. Called with l.mu
// held.
func (l *ledger) end(k ticketKey, c *policy.Choice, tokens int64) {
	c.Done()
	delete(l.tickets, k)
	l.settleLocked(k, tokens)
	l.flow.Freed(1)
}
