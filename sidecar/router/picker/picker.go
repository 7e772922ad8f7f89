// Package picker makes one decision per request for every router replica
// of an endpoint. The replicas elect a leader through a Kubernetes Lease
// (elect.go); the leader holds the only policy that decides (ledger.go),
// in process for its own requests and over a pick API that trusts only the
// endpoint's key (server.go; auth.go signs and seals, replay.go refuses
// replays) for its siblings'. A replica that is not the leader
// is a stateless proxy: it hashes the request's routing text into a
// policy.Key, asks the picker, forwards, and tells the picker when the
// request's first token came and when it ended, so the picker's counts of
// requests and tokens in flight are exact. While no picker answers, a
// replica decides alone by a deterministic fallback (policy.Fallback) and
// hands those requests to the next picker it reaches.
package picker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Options configure a Picker.
type Options struct {
	// Replica is this replica's pod name, which the picker counts its
	// requests under.
	Replica string
	// Keys sign and seal the pick API and key the block hashes.
	Keys Keys
	// Own is this replica's policy: it hashes requests into keys, counts
	// this replica's own requests, and decides while no picker answers.
	Own *policy.Policy
	// Tuning is that of the policy this replica runs while it leads.
	Tuning      policy.Tuning
	PickTimeout time.Duration
	// Tries is how many instances of its order a replica tries (the
	// proxy's --max-attempts); an answer names no more, since a fleet of
	// hundreds would otherwise send hundreds of names with every
	// decision. 0: the whole order.
	Tries   int
	Metrics *Metrics
	Log     logr.Logger
}

// DefaultPickTimeout bounds a pick call: a decision takes microseconds and
// a round trip in a cluster well under a millisecond, so a picker that
// has not answered in 100 ms is stuck or gone, and the fallback is better
// than waiting.
const DefaultPickTimeout = 100 * time.Millisecond

// downFor is how long a replica routes by the fallback after a pick call
// failed, so that requests in the meantime do not each pay the timeout;
// short, so that a new leader is used soon after its first answer.
const downFor = 250 * time.Millisecond

// heartbeatEvery is how often a replica with requests in flight calls the
// picker even when it has nothing to tell (see ledger.seen).
const heartbeatEvery = time.Second

// Picker is one replica's side of the picker: it asks the leader (itself
// or a sibling), or falls back, and tracks its requests in flight.
type Picker struct {
	opts    Options
	cfg     atomic.Pointer[policy.Config]
	flowCfg atomic.Pointer[flow.Config]
	seq     atomic.Uint64
	client  *http.Client
	// session signs and seals this replica's calls; peers are the
	// sessions of the callers its pick API answered.
	session *session
	peers   *peers

	mu   sync.Mutex
	cur  *link   // the picker asked now (nil: none known, fall back)
	lead *ledger // while this replica leads
	// holder reads the Lease's holder identity, self is this replica's
	// (set by Elect, for the handoff).
	holder func(context.Context) (string, error)
	self   string
	epoch  uint64 // the current picker's, once it has answered
	open   map[uint64]*Ticket
	// adopt: some open request may not be counted by the current picker
	// yet (see observe).
	adopt     bool
	downUntil time.Time

	stop context.CancelFunc // ends the election, releasing the Lease
	done chan struct{}
}

// link is the picker as a replica reaches it: its own ledger while it
// leads, another replica's pick listener otherwise; and the queue of
// events for it.
type link struct {
	led    *ledger
	addr   string
	queue  []event
	signal chan struct{}
	cancel context.CancelFunc
}

// New returns a Picker that falls back until told where the picker is
// (Lead, Follow or an election).
func New(opts Options) *Picker {
	if opts.PickTimeout <= 0 {
		opts.PickTimeout = DefaultPickTimeout
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Picker{opts: opts, client: &http.Client{Transport: newTransport()}, session: opts.Keys.newSession(),
		peers: newPeers(opts.Keys, time.Now()), open: map[uint64]*Ticket{}, done: make(chan struct{})}
}

// Update installs a routing configuration, in this replica's policy and in
// the picker's while it leads. Replicas a moment apart cost nothing but an
// unknown instance answered (the request then falls back).
func (p *Picker) Update(cfg policy.Config) error {
	if err := p.opts.Own.Update(cfg); err != nil {
		return err
	}
	p.cfg.Store(&cfg)
	l := p.leading()
	if l == nil {
		return nil
	}
	if err := l.policy.Update(cfg); err != nil {
		return err
	}
	// Instances added or a threshold raised: room for queued requests.
	l.flow.Freed(l.resized())
	return nil
}

// Eject keeps an instance out of this replica's fallback and, while it
// leads, out of every decision until the deadline.
func (p *Picker) Eject(id string, until time.Time) {
	p.opts.Own.Eject(id, until)
	if l := p.leading(); l != nil {
		l.policy.Eject(id, until)
	}
}

// Readmit ends an ejection early.
func (p *Picker) Readmit(id string) {
	p.opts.Own.Readmit(id)
	if l := p.leading(); l != nil {
		l.policy.Readmit(id)
	}
}

// Leading reports whether this replica is the picker now.
func (p *Picker) Leading() bool { return p.leading() != nil }

func (p *Picker) leading() *ledger {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lead
}

// Ticket is one request's decision, held until Done.
type Ticket struct {
	p   *Picker
	seq uint64
	own *policy.Choice
	// mine charges a request this replica decided as the leader to its
	// own counts too (own is the ledger's), for its metrics and its
	// fallback; nil otherwise.
	mine *policy.Choice
	// held is the epoch of the picker that counts the request (0: none
	// yet, decided by the fallback).
	held       uint64
	warm       *policy.Instance // the warm copy a remote picker asked for
	warmTokens int64
	// used is the tokens the request used (Used) plus one, so that its
	// zero value, a response that said nothing, is flow.Unknown at Done.
	used atomic.Int64
	policy.Decision
}

// WarmTarget is the joining instance to send a one-token copy of the
// request to, and its prompt tokens; false when none (policy/warm.go).
func (t *Ticket) WarmTarget() (policy.Instance, int64, bool) {
	if t.warm != nil {
		return *t.warm, t.warmTokens, true
	}
	return t.own.WarmTarget()
}

// Warmed says the warm copy ended, answered (ok) or not: where it was
// decided, the joiner is recorded as holding the key when ok.
func (t *Ticket) Warmed(ok bool) {
	if t.warm == nil {
		t.own.Warmed(ok)
		return
	}
	t.p.tell(t, event{Kind: eventWarmed, Seq: t.seq, OK: ok}, false)
}

// Instance is where the request goes now.
func (t *Ticket) Instance() policy.Instance { return t.own.Instance() }

// Next moves to the next instance after a connection failure; false when
// there is none.
func (t *Ticket) Next() bool {
	if !t.own.Next() {
		return false
	}
	if t.mine != nil {
		t.mine.Next()
	}
	t.p.tell(t, event{Kind: eventNext, Seq: t.seq, Instance: t.own.Instance().ID}, false)
	return true
}

// Prefilled says the first token came.
func (t *Ticket) Prefilled() {
	t.own.Prefilled()
	if t.mine != nil {
		t.mine.Prefilled()
	}
	t.p.tell(t, event{Kind: eventPrefilled, Seq: t.seq}, false)
}

// Used records the tokens the request used (its response's
// usage.total_tokens), which settle its tenant's token rate limit at Done.
func (t *Ticket) Used(tokens int64) { t.used.Store(tokens + 1) }

// Done ends the request; calling it twice is harmless.
func (t *Ticket) Done() {
	t.own.Done()
	if t.mine != nil {
		t.mine.Done()
	}
	t.p.tell(t, event{Kind: eventDone, Seq: t.seq, Tokens: t.used.Load() - 1}, true)
}

// Drop ends a ticket whose request is not sent, nor its warm copy, which
// would otherwise hold one of the joiner's slots for copies.
func (t *Ticket) Drop() {
	t.Warmed(false)
	t.Done()
}

// Pick decides where a request goes: by the picker, or by the fallback
// while none answers. Only a request the policy cannot place at all
// (policy.ErrUnknownModel, policy.ErrNoInstance) or that flow control
// refuses fails.
func (p *Picker) Pick(ctx context.Context, key policy.Key, s Sender) (*Ticket, error) {
	seq := p.seq.Add(1)
	if l, ok := p.asking(); ok {
		if l.led != nil {
			return p.decideHere(ctx, l, seq, key, s)
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, p.opts.PickTimeout)
		req := pickRequest{Seq: seq, Key: key, Sender: s, Events: p.take(l)}
		a, err := p.pickCall(cctx, l.addr, req)
		cancel()
		p.opts.Metrics.PickDuration.Observe(time.Since(start).Seconds())
		var q *errQueued
		if errors.As(err, &q) {
			a, err = p.waitCall(ctx, l, req, q)
		} else if err != nil && !definite(err) {
			p.enqueue(l, true, req.Events...) // the picker may not have had them
		}
		if err == nil {
			t, err := p.follow(l, seq, a)
			if err == nil {
				p.opts.Metrics.Picks.WithLabelValues("picker").Inc()
				return t, nil
			}
			// The picker chose an instance this replica does not know
			// yet (their documents are a moment apart): fall back.
		} else if definite(err) {
			return nil, err
		}
		// The picker may have counted the request, or hold it queued:
		// say it is done (the picker forgets it, or drops it when it
		// arrives) before the fallback's request is adopted under the
		// same number.
		p.enqueue(l, false, event{Kind: eventDone, Seq: seq})
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			p.failed(l, err)
		}
	}
	c, err := p.opts.Own.Fallback(key)
	if err != nil {
		return nil, err
	}
	p.opts.Metrics.Picks.WithLabelValues("fallback").Inc()
	t := &Ticket{p: p, seq: seq, own: c, Decision: c.Decision}
	p.mu.Lock()
	p.open[seq] = t
	p.adopt = true
	p.mu.Unlock()
	return t, nil
}

// definite reports whether err is the picker's answer about the request
// (no such model, no instance, refused by flow control), which the
// request gets, rather than a failed call.
func definite(err error) bool {
	var lim *flow.Limited
	var ref *flow.Refusal
	return errors.Is(err, policy.ErrUnknownModel) || errors.Is(err, policy.ErrNoInstance) || errors.As(err, &lim) || errors.As(err, &ref)
}

// decideHere decides a request while this replica leads: the ledger's
// Choice is the ticket.
func (p *Picker) decideHere(ctx context.Context, l *link, seq uint64, key policy.Key, s Sender) (*Ticket, error) {
	c, err := l.led.decide(ctx, p.opts.Replica, pickRequest{Seq: seq, Key: key, Sender: s, Events: p.take(l)}, time.Now(), true)
	if err != nil {
		return nil, err
	}
	p.opts.Metrics.Picks.WithLabelValues("leader").Inc()
	prompt, prefill, _ := c.Charge()
	mine, _ := p.opts.Own.Follow(c.Order(p.opts.Tries), prompt, prefill, false, c.Decision)
	t := &Ticket{p: p, seq: seq, own: c, mine: mine, held: l.led.epoch, Decision: c.Decision}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open[seq] = t
	p.observe(l, l.led.epoch)
	return t, nil
}

func (p *Picker) asking() (*link, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || time.Now().Before(p.downUntil) {
		return nil, false
	}
	return p.cur, true
}

// follow charges the picker's answer to this replica's own counts and
// tracks the request.
func (p *Picker) follow(l *link, seq uint64, a answer) (*Ticket, error) {
	c, err := p.opts.Own.Follow(a.Order, a.Prompt, a.Prefill, false, a.Decision)
	if err != nil {
		return nil, err
	}
	t := &Ticket{p: p, seq: seq, own: c, held: a.Epoch, Decision: a.Decision}
	if a.Warm != "" {
		// An instance this replica does not know yet goes unwarmed (the
		// picker hears the copy failed).
		ins := p.opts.Own.Instances()
		if i := slices.IndexFunc(ins, func(in policy.Instance) bool { return in.ID == a.Warm }); i >= 0 {
			t.warm, t.warmTokens = &ins[i], a.WarmTokens
		} else {
			p.enqueue(l, false, event{Kind: eventWarmed, Seq: seq})
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open[seq] = t
	p.observe(l, a.Epoch)
	return t, nil
}

// observe notes the epoch of an answer from l. A picker new to this
// replica (a new term, or one that answers for the first time after the
// fallback) adopts every request in flight it does not count yet, so its
// counts are exact again from then on. Called with p.mu held.
func (p *Picker) observe(l *link, epoch uint64) {
	if l != p.cur {
		return
	}
	if epoch != p.epoch {
		p.epoch, p.adopt = epoch, true
	}
	if !p.adopt {
		return
	}
	var adopts []event
	for _, t := range p.open {
		if t.held == epoch {
			continue
		}
		prompt, prefill, prefilled := t.own.Charge()
		adopts = append(adopts, event{Kind: eventAdopt, Seq: t.seq, Order: t.own.Order(p.opts.Tries), Prompt: prompt, Prefill: prefill, Prefilled: prefilled})
		t.held = epoch
	}
	p.adopt = false
	p.deliverLocked(l, false, adopts...)
	l.wake()
}

// tell gives an event about t to the picker that counts it; a request
// the current picker does not count yet is adopted with its state at that
// time instead, so nothing is lost.
func (p *Picker) tell(t *Ticket, e event, done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done {
		if _, ok := p.open[t.seq]; !ok {
			return
		}
		delete(p.open, t.seq)
	}
	if t.held == 0 || t.held != p.epoch || p.cur == nil {
		return
	}
	p.deliverLocked(p.cur, false, e)
}

func (p *Picker) take(l *link) []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := l.queue
	l.queue = nil
	return evs
}

func (p *Picker) enqueue(l *link, front bool, evs ...event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deliverLocked(l, front, evs...)
}

// deliverLocked hands events to l's picker: at once when it is this
// replica's own ledger, so that a slot a request freed here is free for
// the next pick (a batch the sender has taken is not counted until it
// arrives); else to l's queue, in front for those a failed call carried,
// so that they go again first. Called with p.mu held.
func (p *Picker) deliverLocked(l *link, front bool, evs ...event) {
	if len(evs) == 0 {
		return
	}
	if l.led != nil {
		l.led.apply(p.opts.Replica, evs, time.Now())
		return
	}
	if front {
		l.queue = append(evs, l.queue...)
	} else {
		l.queue = append(l.queue, evs...)
	}
	l.wake()
}

func (l *link) wake() {
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

func (p *Picker) failed(l *link, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l == p.cur {
		p.downUntil = time.Now().Add(downFor)
	}
	p.opts.Metrics.PickErrors.Inc()
	p.opts.Log.V(1).Info("pick call failed; routing by the fallback", "picker", l.addr, "error", err.Error())
}

// useLocked makes the picker asked from now on this replica's own ledger
// led, or the pick listener at addr, or none, and starts its event sender.
// Called with p.mu held.
func (p *Picker) useLocked(led *ledger, addr string) {
	if p.cur != nil {
		p.cur.cancel()
		p.cur = nil
	}
	p.epoch, p.downUntil, p.adopt = 0, time.Time{}, true
	if led == nil && addr == "" {
		p.opts.Metrics.Known.Set(0)
		return
	}
	p.opts.Metrics.Known.Set(1)
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{led: led, addr: addr, signal: make(chan struct{}, 1), cancel: cancel}
	p.cur = l
	go p.send(ctx, l)
	// Tell the new picker of the requests in flight at once, rather than
	// at the first pick: a request may end before another arrives.
	l.wake()
}

// send delivers a sibling's queued events in order, batching whatever
// queued while the last batch was on its way, and calls at least every
// heartbeatEvery while this replica has requests in flight (its own
// ledger's events are applied at once: deliverLocked).
func (p *Picker) send(ctx context.Context, l *link) {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.signal:
		case <-tick.C:
		}
		p.mu.Lock()
		batch := l.queue
		l.queue = nil
		idle := len(batch) == 0 && len(p.open) == 0
		p.mu.Unlock()
		if idle {
			continue
		}
		for attempt := 0; ; attempt++ {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			epoch, err := p.events(cctx, l, batch)
			cancel()
			if err == nil {
				p.mu.Lock()
				p.observe(l, epoch)
				p.mu.Unlock()
				break
			}
			if ctx.Err() != nil || attempt == 2 {
				// The picker is gone or replaced; the next one adopts
				// what is still in flight.
				p.opts.Log.V(1).Info("events not delivered", "picker", l.addr, "events", len(batch), "error", err.Error())
				break
			}
			time.Sleep(50 * time.Millisecond << attempt)
		}
	}
}

// Lead makes this replica the picker, with a new ledger: for good without
// an election (benchmarks, tests, a single router), else for a term.
func (p *Picker) Lead() error {
	l, err := newLedger(p.opts.Tuning, p.cfg.Load(), p.flowConfig(), p.opts.Metrics.Flow, p.opts.Tries)
	if err != nil {
		return fmt.Errorf("start picker: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lead = l
	p.opts.Metrics.Leader.Set(1)
	p.useLocked(l, "")
	return nil
}

// Follow makes the replica at addr (its pick listener) the picker asked
// ("" : none).
func (p *Picker) Follow(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.useLocked(nil, addr)
}

// track points this replica at the picker the Lease names (holder, while
// another replica leads). It compares the Lease with the picker this
// replica asks now, not with the Lease it saw last: a term ends (stepDown,
// which drops the link) up to the renew deadline after the Lease moved,
// and whichever of the two comes first, the next look at the Lease sets
// the link right.
func (p *Picker) track(holder, self string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if holder == self || p.lead != nil {
		return // this replica's term is starting, or not over yet
	}
	want, asked := addressOf(holder), ""
	if p.cur != nil {
		asked = p.cur.addr
	}
	if want != asked {
		p.opts.Log.Info("following the elected picker", "leader", holder)
		p.useLocked(nil, want)
	}
}

// stepDown ends this replica's term: it stops deciding (callers get 503
// and fall back or find the successor) and returns its state for the
// successor (nil if it did not lead).
func (p *Picker) stepDown() []byte {
	p.mu.Lock()
	l := p.lead
	p.lead = nil
	p.mu.Unlock()
	if l == nil {
		return nil
	}
	snap := l.policy.Snapshot()
	// Queued requests are placed now, on this term's counts, which the
	// next picker adopts from their replicas.
	l.flow.Update(flow.Config{})
	p.opts.Metrics.Leader.Set(0)
	p.mu.Lock()
	p.useLocked(nil, "")
	p.mu.Unlock()
	return snap
}

func (p *Picker) Metrics() *Metrics { return p.opts.Metrics }
