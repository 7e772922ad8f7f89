package picker

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Flow control runs where the decisions are made, in the elected picker's
// ledger, so that limits and shares hold per endpoint whatever the number
// of router replicas. A request the ledger queues from another replica is
// answered statusQueued at once; the replica then calls again, marked
// Wait, and that call stays open until the request is released (and
// decided), refused, or its client leaves (the call is cancelled).

// Sender is who sends a request, for flow control: its tenant, and the
// priority it asks for (X-Warmroute-Priority, or its InferenceObjective's)
// when Lowers is set. Flow control never lets a request rise above its
// tenant's priority.
type Sender struct {
	Tenant   string
	Priority int
	Lowers   bool
}

// errQueued is the ledger's answer to a replica's request that must wait:
// the replica calls again with Wait set and Epoch, within Timeout.
type errQueued struct {
	Epoch   int64
	Timeout time.Duration
}

func (e *errQueued) Error() string { return "queued: every instance that could serve it is full" }

// SetFlow installs an endpoint's flow control (the zero Config: off),
// in the picker this replica runs while it leads.
func (p *Picker) SetFlow(cfg flow.Config) {
	p.flowCfg.Store(&cfg)
	if l := p.leading(); l != nil {
		l.flow.Update(cfg)
	}
}

func (p *Picker) flowConfig() flow.Config {
	if c := p.flowCfg.Load(); c != nil {
		return *c
	}
	return flow.Config{}
}

// admit runs flow control in front of the decision: the tenant's rate
// limits, then the queue when every instance that could serve the request
// is full (or other requests already wait, which it must not overtake).
// A local request (the leader's own) waits here; another replica's is
// answered errQueued until it calls again with Wait.
func (l *ledger) admit(ctx context.Context, replica string, req pickRequest, local bool) (*policy.Choice, error) {
	f := l.flow
	if !f.Enabled() {
		return l.policy.Pick(req.Key)
	}
	k := ticketKey{replica, req.Seq}
	tenant, est := req.Sender.Tenant, l.policy.PromptTokens(req.Key)
	prio := math.MaxInt
	if req.Sender.Lowers {
		prio = req.Sender.Priority
	}
	prio = f.Clamp(tenant, prio)
	var t *flow.Ticket
	if !req.Wait {
		var lim *flow.Limited
		if t, lim = f.Admit(tenant, est); lim != nil {
			return nil, lim
		}
		l.mu.Lock()
		if old := l.admitted[k]; old != nil {
			old.Settle(flow.Unknown) // a restarted replica reused the number
		}
		l.admitted[k] = t
		l.mu.Unlock()
		if c, placed, err := l.pickIfRoom(req, t, prio, &req.Epoch); placed {
			return c, l.unadmitted(k, err)
		}
		if !local {
			return nil, &errQueued{Epoch: req.Epoch, Timeout: f.QueueTimeout()}
		}
	} else {
		l.mu.Lock()
		t = l.admitted[k]
		l.mu.Unlock()
	}
	q := flow.Queued{Tenant: tenant, Priority: prio, Tokens: est, Epoch: req.Epoch, Ticket: t}
	err := f.Wait(ctx, q)
	for errors.Is(err, flow.ErrRetry) {
		// Room freed since it looked: take it unless another did.
		if c, placed, err := l.pickIfRoom(req, t, prio, &q.Epoch); placed {
			return c, l.unadmitted(k, err)
		}
		err = f.Wait(ctx, q)
	}
	if err != nil {
		return nil, l.unadmitted(k, err)
	}
	// Released: placed now, even over a threshold if a request that
	// did not wait took the room in between.
	c, err := l.policy.Pick(req.Key)
	if err != nil {
		f.Freed(1) // the room it was released for is the next one's
	}
	return c, l.unadmitted(k, err)
}

// pickIfRoom places a request unless flow control says it waits
// (flow.Controller.MayPlace) or every instance that could serve it is
// full (placed false); it reads the flow's epoch first into epoch, for the
// wait that follows.
func (l *ledger) pickIfRoom(req pickRequest, t *flow.Ticket, prio int, epoch *int64) (c *policy.Choice, placed bool, err error) {
	*epoch = l.flow.Epoch()
	if !l.flow.MayPlace(req.Sender.Tenant, prio) {
		return nil, false, nil
	}
	c, err = l.policy.PickIfRoom(req.Key)
	if errors.Is(err, policy.ErrFull) {
		return nil, false, nil
	}
	if err == nil {
		l.flow.Start(t)
	}
	return c, true, err
}

// unadmitted settles the rate limits of a request that will not be sent
// (err non-nil): it used no tokens.
func (l *ledger) unadmitted(k ticketKey, err error) error {
	if err != nil {
		l.mu.Lock()
		l.settleLocked(k, 0)
		l.mu.Unlock()
	}
	return err
}

// settleLocked settles a request's rate limits with the tokens it used
// (flow.Unknown: the estimate stands). Called with l.mu held.
func (l *ledger) settleLocked(k ticketKey, tokens int64) {
	if t, ok := l.admitted[k]; ok {
		t.Settle(tokens)
		delete(l.admitted, k)
	}
}

// waitCall is the second call of a request the picker queued: it stays
// open for the queue timeout, and a moment more for the decision.
func (p *Picker) waitCall(ctx context.Context, l *link, req pickRequest, q *errQueued) (answer, error) {
	req.Wait, req.Epoch, req.Events = true, q.Epoch, p.take(l)
	cctx, cancel := context.WithTimeout(ctx, q.Timeout+p.opts.PickTimeout)
	defer cancel()
	return p.pickCall(cctx, l.addr, req)
}
