package flow

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A deterministic simulation of the controller in front of a fleet: Slots
// requests in service at once, each for its tokens × PerToken; a request
// that finds every slot busy (or others queued) waits in the controller,
// and each completion releases the next. Arrivals are Poisson, per stream.

type stream struct {
	tenant   string
	priority int
	perSec   float64 // arrivals per second
	// tokens: uniform in [tokens/2, 3·tokens/2].
	tokens int64
}

type simConfig struct {
	slots    int
	perToken time.Duration
	length   time.Duration
	flow     Config
	// fifo: no flow control: one queue in arrival order, unbounded, as the
	// instances' own queues are when the router spills to them.
	fifo    bool
	streams []stream
	seed    uint64
}

type simResult struct {
	waits  map[string][]time.Duration // of requests served, by tenant
	shed   map[string]map[Reason]int
	served map[string]int64 // tokens served, by tenant
}

func (r simResult) p90(tenant string) time.Duration { return percentile(r.waits[tenant], 0.9) }

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

type simEvent struct {
	at     time.Time
	seq    int
	stream int     // ≥ 0: an arrival of that stream; -1: a completion
	ticket *Ticket // a completion's, under flow control
}

type events []simEvent

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].at.Equal(e[j].at) {
		return e[i].at.Before(e[j].at)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(simEvent)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func simulate(cfg simConfig) simResult {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := start
	c := New(cfg.flow, func() time.Time { return now })
	c.SetCapacity(cfg.slots)
	rng := rand.New(rand.NewPCG(cfg.seed, 1))
	res := simResult{waits: map[string][]time.Duration{}, shed: map[string]map[Reason]int{}, served: map[string]int64{}}
	var ev events
	seq := 0
	push := func(at time.Time, stream int, t *Ticket) {
		seq++
		heap.Push(&ev, simEvent{at: at, seq: seq, stream: stream, ticket: t})
	}
	interarrival := func(s stream) time.Duration {
		return time.Duration(rng.ExpFloat64() / s.perSec * float64(time.Second))
	}
	for i, s := range cfg.streams {
		push(now.Add(interarrival(s)), i, nil)
	}
	type job struct {
		tenant  string
		tokens  int64
		arrived time.Time
		ticket  *Ticket
		w       *waiter
	}
	busy := 0
	var fifo []job
	queued := map[*waiter]job{} // under flow control
	serve := func(j job) {
		busy++
		res.waits[j.tenant] = append(res.waits[j.tenant], now.Sub(j.arrived))
		res.served[j.tenant] += j.tokens
		push(now.Add(time.Duration(j.tokens)*cfg.perToken), -1, j.ticket)
	}
	// collect serves the queued requests the controller released, in the
	// order it released them, and counts those it refused.
	collect := func() {
		var released []job
		for w, j := range queued {
			if w.resolved {
				delete(queued, w)
				if w.err == nil {
					released = append(released, j)
				} else {
					res.refused(j.tenant, w.err)
				}
			}
		}
		slices.SortFunc(released, func(a, b job) int { return int(a.w.seq - b.w.seq) })
		for _, j := range released {
			serve(j)
		}
	}
	end := start.Add(cfg.length)
	for ev.Len() > 0 {
		e := heap.Pop(&ev).(simEvent)
		if e.at.After(end) {
			break
		}
		now = e.at
		if !cfg.fifo && c.running != busy {
			panic(fmt.Sprintf("at %v the controller counts %d running, the fleet %d", now.Sub(start), c.running, busy))
		}
		if e.stream < 0 {
			busy--
			if cfg.fifo {
				if len(fifo) > 0 {
					serve(fifo[0])
					fifo = fifo[1:]
				}
				continue
			}
			e.ticket.Settle(e.ticket.est)
			c.Freed(1)
			collect()
			continue
		}
		s := cfg.streams[e.stream]
		push(now.Add(interarrival(s)), e.stream, nil)
		j := job{tenant: s.tenant, tokens: s.tokens/2 + rng.Int64N(s.tokens+1), arrived: now}
		prio := c.Clamp(s.tenant, s.priority)
		if !cfg.fifo {
			j.ticket, _ = c.Admit(s.tenant, j.tokens)
		}
		switch {
		case cfg.fifo && busy < cfg.slots:
			serve(j)
		case cfg.fifo:
			fifo = append(fifo, j)
		case !cfg.fifo && func() bool { ok := c.MayPlace(s.tenant, prio); collect(); return ok && busy < cfg.slots }():
			c.Start(j.ticket)
			serve(j)
		default:
			c.mu.Lock()
			w, _, err := c.arriveLocked(Queued{Tenant: s.tenant, Priority: prio, Tokens: j.tokens, Epoch: c.Epoch(), Ticket: j.ticket})
			c.mu.Unlock()
			if w == nil {
				res.refused(s.tenant, err)
				continue
			}
			j.w = w
			queued[w] = j
		}
	}
	for _, j := range queued { // the shed, and those still queued at the end
		if j.w.resolved {
			res.refused(j.tenant, j.w.err)
		}
	}
	return res
}

func (r simResult) refused(tenant string, err error) {
	var ref *Refusal
	if !errors.As(err, &ref) {
		panic(fmt.Sprintf("a simulated arrival was answered %v", err))
	}
	if r.shed[tenant] == nil {
		r.shed[tenant] = map[Reason]int{}
	}
	r.shed[tenant][ref.Reason]++
}

// TestNoisyNeighbour: tenant a floods the endpoint at 5× its fair share
// while b sends its usual load (80 % of its share, as in make bench-flow);
// b is never refused and waits no longer than alone on its share, and
// from 8 slots up (where the slot a always keeps is at most an eighth of
// the fleet) about as long as alone on the whole fleet: its queue wait p90
// within 1.2× of that, or a hundredth of a request's service time when it
// waits not at all alone.
// Without flow control (one queue in arrival order, the instances' own) its
// wait grows without bound. Without the headroom (headroom.go), every
// request of b finds the fleet full and waits for the next slot to free.
func TestNoisyNeighbour(t *testing.T) {
	cfg := Config{QueueTimeout: 30 * time.Second, MaxQueued: 1000, Default: Limits{Weight: 1, MaxQueued: 100},
		Tenants: map[string]Limits{"a": {Weight: 1, MaxQueued: 100}, "b": {Weight: 1, MaxQueued: 100}}}
	for _, slots := range []int{4, 8, 16} {
		t.Run(fmt.Sprintf("%d slots", slots), func(t *testing.T) {
			// Requests of about 1000 tokens take about a second: a slot
			// serves one a second. b's load is 80 % of its share.
			b := stream{tenant: "b", perSec: 0.4 * float64(slots), tokens: 1000}
			a := stream{tenant: "a", perSec: 5 * 0.5 * float64(slots), tokens: 1000}
			run := simConfig{slots: slots, perToken: time.Millisecond, length: time.Hour, flow: cfg, seed: 7}
			share, whole, shared, baseline := run, run, run, run
			share.slots, share.streams = slots/2, []stream{b}
			whole.streams = []stream{b}
			shared.streams = []stream{a, b}
			baseline.streams, baseline.fifo, baseline.length = shared.streams, true, 10*time.Minute
			rsh, rw, rs, rb := simulate(share), simulate(whole), simulate(shared), simulate(baseline)
			if rsh.p90("b") == 0 {
				t.Fatal("b never queued on its share: the comparison would mean nothing")
			}
			ratio := float64(rs.p90("b")) / float64(rsh.p90("b"))
			t.Logf("b queue wait p90: on its share %v, next to a %v (×%.2f), alone on the whole fleet %v, without flow control %v; served a %d, b %d tokens; a refused %v",
				ms(rsh.p90("b")), ms(rs.p90("b")), ratio, ms(rw.p90("b")), rb.p90("b").Round(time.Second), rs.served["a"], rs.served["b"], rs.shed["a"])
			if ratio > 1.2 {
				t.Errorf("b's queue wait p90 next to a is %.2f× its p90 on its share of the fleet, want ≤ 1.2×", ratio)
			}
			if limit := max(rw.p90("b")*12/10, 10*time.Millisecond); slots >= 8 && rs.p90("b") > limit {
				t.Errorf("b's queue wait p90 next to a is %v, want ≤ %v (1.2× alone on the whole fleet, or 1 %% of a request)", ms(rs.p90("b")), ms(limit))
			}
			if rs.served["a"] == 0 {
				t.Errorf("a was never served: the headroom starved it")
			}
			if len(rs.shed["b"]) > 0 {
				t.Errorf("b had requests refused: %v", rs.shed["b"])
			}
			if len(rs.shed["a"]) == 0 {
				t.Errorf("a was never refused: the fleet was not saturated")
			}
			if rb.p90("b") < 10*rsh.p90("b") {
				t.Errorf("without flow control b's p90 is %v, under 10× %v: the workload does not saturate the fleet", rb.p90("b"), rsh.p90("b"))
			}
		})
	}
}

// TestPriorityUnderBatch: interactive requests (priority 100) keep their
// queue wait p90 within 1.2× of running alone while batch requests (−100)
// saturate the fleet. Interactive traffic keeps the fleet at its knee (85 %
// busy), so it queues alone too; the batch requests are as long as the
// interactive ones, since the time to the next free slot, which a request
// finding the fleet full pays, grows with what holds the slots.
func TestPriorityUnderBatch(t *testing.T) {
	cfg := Config{QueueTimeout: 30 * time.Second, MaxQueued: 1000, Default: Limits{Weight: 1, Priority: 100, MaxQueued: 1000}}
	const slots = 4
	chat := stream{tenant: "chat", priority: 100, perSec: 0.85 * slots, tokens: 1000}
	batch := stream{tenant: "batch", priority: -100, perSec: 2 * slots, tokens: 1000}
	run := simConfig{slots: slots, perToken: time.Millisecond, length: time.Hour, flow: cfg, seed: 7}
	alone, shared := run, run
	alone.streams, shared.streams = []stream{chat}, []stream{chat, batch}
	ra, rs := simulate(alone), simulate(shared)
	if ra.p90("chat") == 0 {
		t.Fatal("interactive requests never queued alone: the comparison would mean nothing")
	}
	ratio := float64(rs.p90("chat")) / float64(ra.p90("chat"))
	t.Logf("interactive queue wait p90: alone %v, under batch %v (×%.2f); batch served %d tokens, refused %v",
		ms(ra.p90("chat")), ms(rs.p90("chat")), ratio, rs.served["batch"], rs.shed)
	if ratio > 1.2 {
		t.Errorf("interactive queue wait p90 under batch is %.2f× alone, want ≤ 1.2×", ratio)
	}
	if rs.served["batch"] == 0 {
		t.Errorf("batch was never served: the fleet was never left to it")
	}
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
