package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// arrival is a request queued by a row: its label is what the row expects
// to see released or shed.
type arrival struct {
	label    string
	tenant   string
	prio     int
	tokens   int64
	deadline time.Duration // the queue timeout it arrives under; 0: the Config's
}

// queueing is a controller on a simulated clock with the requests its rows
// queued, by waiter.
type queueing struct {
	t      *testing.T
	clk    *simClock
	c      *Controller
	labels map[*waiter]string
}

func newQueueing(t *testing.T, cfg Config) *queueing {
	clk := newSimClock()
	return &queueing{t: t, clk: clk, c: New(cfg, clk.time), labels: map[*waiter]string{}}
}

// arrive queues as, in order; it returns the refusal of each refused, by
// label.
func (q *queueing) arrive(as ...arrival) map[string]*Refusal {
	refused := map[string]*Refusal{}
	for _, a := range as {
		q.c.mu.Lock()
		timeout := q.c.cfg.QueueTimeout
		if a.deadline != 0 {
			q.c.cfg.QueueTimeout = a.deadline // as if an Update had changed it
		}
		w, _, err := q.c.arriveLocked(Queued{Tenant: a.tenant, Priority: a.prio, Tokens: a.tokens, Epoch: q.c.Epoch()})
		q.c.cfg.QueueTimeout = timeout
		q.c.mu.Unlock()
		if w == nil {
			var r *Refusal
			if !errors.As(err, &r) {
				q.t.Fatalf("%s: answered %v, want queued or refused", a.label, err)
			}
			refused[a.label] = r
			continue
		}
		q.labels[w] = a.label
	}
	return refused
}

// release releases n, one by one, and lists them.
func (q *queueing) release(n int) []string {
	var out []string
	for range n {
		q.c.mu.Lock()
		q.c.expireLocked(q.clk.now)
		w := q.c.q.next(nil)
		if w != nil {
			q.c.releaseLocked(1, q.clk.now, nil)
		}
		q.c.mu.Unlock()
		if w == nil {
			break
		}
		out = append(out, q.labels[w])
	}
	return out
}

// shed lists the queued requests answered with a refusal, and why.
func (q *queueing) shed() map[string]Reason {
	out := map[string]Reason{}
	for w, label := range q.labels {
		var r *Refusal
		if errors.As(w.err, &r) {
			out[label] = r.Reason
		}
	}
	return out
}

func many(n int, label, tenant string, prio int, tokens int64) []arrival {
	out := make([]arrival, n)
	for i := range out {
		out[i] = arrival{fmt.Sprintf("%s%d", label, i), tenant, prio, tokens, 0}
	}
	return out
}

func twoTenants(wa, wb, pa, pb int) Config {
	return Config{QueueTimeout: 30 * time.Second, MaxQueued: 1000, Default: Limits{Weight: 1, MaxQueued: 100},
		Tenants: map[string]Limits{"a": {Weight: wa, Priority: pa, MaxQueued: 100}, "b": {Weight: wb, Priority: pb, MaxQueued: 100}}}
}

func count(labels []string, prefix string) (n int) {
	for _, l := range labels {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// TestReleaseOrderRules pins the order queued requests are released in,
// row by row.
func TestReleaseOrderRules(t *testing.T) {
	t.Run("a higher priority first, whatever the shares", func(t *testing.T) {
		q := newQueueing(t, twoTenants(100, 1, 0, 10))
		q.arrive(append(many(3, "a", "a", 0, 10), many(3, "b", "b", 10, 1000)...)...)
		if got := strings.Join(q.release(6), " "); got != "b0 b1 b2 a0 a1 a2" {
			t.Errorf("released %s", got)
		}
	})
	t.Run("a request lowers its own priority, never raises it", func(t *testing.T) {
		q := newQueueing(t, twoTenants(1, 1, 0, 0))
		q.arrive(arrival{"a-up", "a", 50, 100, 0}, arrival{"b-down", "b", -5, 100, 0}, arrival{"a", "a", 0, 100, 0})
		if got := strings.Join(q.release(3), " "); got != "a-up a b-down" {
			t.Errorf("released %s", got)
		}
	})
	for _, tc := range []struct {
		rule         string
		wa, wb       int
		a, b         int64 // tokens of each request
		n            int   // released
		wantA, wantB int
	}{
		{"then the least weighted service: weights 2:1 serve twice the tokens", 2, 1, 100, 100, 30, 20, 10},
		{"service is counted in tokens, not requests", 1, 1, 1000, 100, 22, 2, 20},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			q := newQueueing(t, twoTenants(tc.wa, tc.wb, 0, 0))
			q.arrive(append(many(30, "a", "a", 0, tc.a), many(30, "b", "b", 0, tc.b)...)...)
			got := q.release(tc.n)
			if a, b := count(got, "a"), count(got, "b"); a != tc.wantA || b != tc.wantB {
				t.Errorf("of the first %d: %d of a and %d of b, want %d and %d: %v", tc.n, a, b, tc.wantA, tc.wantB, got)
			}
		})
	}
	t.Run("then the earliest deadline within a tenant", func(t *testing.T) {
		q := newQueueing(t, twoTenants(1, 1, 0, 0))
		q.arrive(arrival{"late", "a", 0, 100, 25 * time.Second}, arrival{"none", "a", 0, 100, 0},
			arrival{"early", "a", 0, 100, 5 * time.Second}, arrival{"middle", "a", 0, 100, 15 * time.Second})
		if got := strings.Join(q.release(4), " "); got != "early middle late none" {
			t.Errorf("released %s", got)
		}
	})
	t.Run("an idle tenant banks no credit", func(t *testing.T) {
		q := newQueueing(t, twoTenants(1, 1, 0, 0))
		q.arrive(many(20, "a", "a", 0, 100)...)
		q.release(10) // a alone: b idle meanwhile
		q.arrive(many(10, "b", "b", 0, 100)...)
		got := q.release(10)
		if a, b := count(got, "a"), count(got, "b"); a != 5 || b != 5 {
			t.Errorf("after b's idle spell, the next 10: %d of a and %d of b, want 5 each: %v", a, b, got)
		}
	})
	t.Run("a request whose deadline passed is answered, not released", func(t *testing.T) {
		q := newQueueing(t, twoTenants(1, 1, 0, 0))
		q.arrive(arrival{"short", "a", 0, 100, time.Second}, arrival{"long", "a", 0, 100, 0})
		q.clk.advance(2 * time.Second)
		if got := strings.Join(q.release(2), " "); got != "long" {
			t.Errorf("released %s", got)
		}
		if got := q.shed(); got["short"] != ReasonDeadline {
			t.Errorf("shed %v, want short for its deadline", got)
		}
	})
}

// TestShedRules pins which request a full queue refuses, and how.
func TestShedRules(t *testing.T) {
	small := func(maxQueued int) Config {
		c := twoTenants(1, 1, 0, 0)
		c.MaxQueued = maxQueued
		return c
	}
	for _, tc := range []struct {
		rule     string
		cfg      Config
		queued   []arrival
		arriving arrival
		refused  Reason            // the arrival's, "" if queued
		shed     map[string]Reason // queued requests shed
		status   int
	}{
		{"a tenant at its maxQueued: the arrival, 429", func() Config {
			c := small(1000)
			c.Tenants["a"] = Limits{Weight: 1, MaxQueued: 2}
			return c
		}(), many(2, "a", "a", 0, 100), arrival{"new", "a", 0, 100, 0}, ReasonTenantQueueFull, nil, 429},
		{"a tenant never queued: 503", func() Config {
			c := small(1000)
			c.Tenants["a"] = Limits{Weight: 1}
			return c
		}(), nil, arrival{"new", "a", 0, 100, 0}, ReasonNotQueued, nil, 503},
		{"the queue full, the arrival ranks lowest: the arrival, 503", small(3), many(3, "b", "b", 0, 100),
			arrival{"new", "a", -1, 100, 0}, ReasonPressure, nil, 503},
		{"the queue full: the lowest priority queued goes", small(3),
			[]arrival{{"b-high", "b", 0, 100, 0}, {"b-low", "b", -5, 100, 0}, {"a-mid", "a", -2, 100, 0}},
			arrival{"new", "a", -1, 100, 0}, "", map[string]Reason{"b-low": ReasonPressure}, 0},
		{"equal priority: the tenant furthest over its weighted share", small(3),
			[]arrival{{"a0", "a", 0, 100, 0}, {"b0", "b", 0, 500, 0}, {"a1", "a", 0, 100, 0}},
			arrival{"new", "a", 0, 100, 0}, "", map[string]Reason{"b0": ReasonPressure}, 0},
		{"then its latest deadline", small(3),
			[]arrival{{"b-late", "b", 0, 100, 20 * time.Second}, {"b-early", "b", 0, 100, 10 * time.Second}, {"a0", "a", 0, 10, 0}},
			arrival{"new", "a", 0, 10, 0}, "", map[string]Reason{"b-late": ReasonPressure}, 0},
		{"the arrival's tenant furthest over: the arrival", small(3),
			[]arrival{{"a0", "a", 0, 100, 0}, {"b0", "b", 0, 100, 0}, {"a1", "a", 0, 100, 0}},
			arrival{"new", "a", 0, 100, 0}, ReasonPressure, nil, 503},
		{"a deadline already past: 503", small(3), nil, arrival{"new", "a", 0, 100, -time.Second}, ReasonDeadline, nil, 503},
	} {
		q := newQueueing(t, tc.cfg)
		if r := q.arrive(tc.queued...); len(r) > 0 {
			t.Fatalf("%s: setting up, refused %v", tc.rule, r)
		}
		got := q.arrive(tc.arriving)[tc.arriving.label]
		switch {
		case tc.refused == "" && got != nil:
			t.Errorf("%s: the arrival was refused: %v", tc.rule, got)
		case tc.refused != "" && (got == nil || got.Reason != tc.refused):
			t.Errorf("%s: the arrival got %v, want refused for %s", tc.rule, got, tc.refused)
		case got != nil:
			if got.Reason.Status() != tc.status {
				t.Errorf("%s: status %d, want %d", tc.rule, got.Reason.Status(), tc.status)
			}
			if got.RetryAfter < time.Second || got.RetryAfter > tc.cfg.QueueTimeout {
				t.Errorf("%s: Retry-After %v, want 1 s to the queue timeout", tc.rule, got.RetryAfter)
			}
		}
		if shed := q.shed(); fmt.Sprint(shed) != fmt.Sprint(orEmpty(tc.shed)) {
			t.Errorf("%s: shed %v, want %v", tc.rule, shed, tc.shed)
		}
	}
}

func orEmpty(m map[string]Reason) map[string]Reason {
	if m == nil {
		return map[string]Reason{}
	}
	return m
}

// TestReloadRequeues: a reload keeps queued requests; a removed tenant's
// fall under Default, priorities are clamped to the new ones, and requests
// over a lowered bound are shed, the lowest ranked first.
func TestReloadRequeues(t *testing.T) {
	q := newQueueing(t, twoTenants(1, 1, 10, 0))
	q.arrive(arrival{"a-hi", "a", 10, 100, 0}, arrival{"a-lo", "a", 0, 100, 0},
		arrival{"b0", "b", 0, 100, 0}, arrival{"b1", "b", 0, 100, 0}, arrival{"b2", "b", 0, 100, 0})
	cfg := Config{QueueTimeout: 30 * time.Second, MaxQueued: 4, Default: Limits{Weight: 1, Priority: 5, MaxQueued: 100},
		Tenants: map[string]Limits{"b": {Weight: 1, MaxQueued: 100}}}
	q.c.Update(cfg)
	if got := q.shed(); fmt.Sprint(got) != fmt.Sprint(map[string]Reason{"b2": ReasonPressure}) {
		t.Errorf("shed %v, want b2 (the lowest priority, latest of the tenant furthest over its share)", got)
	}
	// a-hi keeps priority 5 (Default's), a-lo 0: it then takes turns with b.
	if got := strings.Join(q.release(4), " "); got != "a-hi b0 a-lo b1" {
		t.Errorf("released %s, want a-hi b0 a-lo b1", got)
	}
	if n := q.c.Waiting(); n != 0 {
		t.Errorf("%d waiting after all released", n)
	}
}

// TestDisableReleases: turning flow control off releases the queued, since
// the router then places every request as it comes.
func TestDisableReleases(t *testing.T) {
	q := newQueueing(t, twoTenants(1, 1, 0, 0))
	q.arrive(many(3, "a", "a", 0, 100)...)
	q.c.Update(FromDocument(nil))
	for w, label := range q.labels {
		if !w.resolved || w.err != nil {
			t.Errorf("%s: resolved %v with %v, want released", label, w.resolved, w.err)
		}
	}
	if n := q.c.Waiting(); n != 0 {
		t.Errorf("%d waiting after flow control was turned off", n)
	}
}

// TestWaitOutcomes runs Wait in goroutines, one outcome per row.
func TestWaitOutcomes(t *testing.T) {
	cfg := twoTenants(1, 1, 0, 0)
	cfg.MaxQueued = 1
	queued := func(c *Controller, tenant string, prio int) chan error {
		out := make(chan error, 1)
		e := c.Epoch()
		before := c.Waiting()
		go func() {
			out <- c.Wait(context.Background(), Queued{Tenant: tenant, Priority: prio, Tokens: 10, Epoch: e})
		}()
		for c.Waiting() == before {
			time.Sleep(time.Millisecond)
		}
		return out
	}
	t.Run("released when capacity frees", func(t *testing.T) {
		c := New(cfg, time.Now)
		done := queued(c, "a", 0)
		c.Freed(1)
		if err := <-done; err != nil {
			t.Errorf("Wait: %v, want nil", err)
		}
	})
	t.Run("refused at its deadline", func(t *testing.T) {
		short := cfg
		short.QueueTimeout = 100 * time.Millisecond
		c := New(short, time.Now)
		err := <-queued(c, "a", 0)
		if r := (*Refusal)(nil); !errors.As(err, &r) || r.Reason != ReasonDeadline {
			t.Errorf("Wait: %v, want refused for its deadline", err)
		}
		if c.Waiting() != 0 {
			t.Errorf("still %d waiting", c.Waiting())
		}
	})
	t.Run("shed when a higher priority takes its place", func(t *testing.T) {
		c := New(cfg, time.Now)
		low := queued(c, "a", -1)
		high := make(chan error, 1)
		e := c.Epoch()
		go func() { high <- c.Wait(context.Background(), Queued{Tenant: "b", Epoch: e}) }()
		var r *Refusal
		if err := <-low; !errors.As(err, &r) || r.Reason != ReasonPressure {
			t.Errorf("the lower: %v, want shed for pressure", err)
		}
		c.Freed(1)
		if err := <-high; err != nil {
			t.Errorf("the higher: %v, want released", err)
		}
	})
	t.Run("ctx.Err when the client leaves", func(t *testing.T) {
		c := New(cfg, time.Now)
		ctx, cancel := context.WithCancel(context.Background())
		e := c.Epoch()
		out := make(chan error, 1)
		go func() { out <- c.Wait(ctx, Queued{Tenant: "a", Epoch: e}) }()
		for c.Waiting() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-out; !errors.Is(err, context.Canceled) {
			t.Errorf("Wait: %v, want context.Canceled", err)
		}
		if c.Waiting() != 0 {
			t.Errorf("still %d waiting", c.Waiting())
		}
	})
	t.Run("ErrRetry at once when capacity freed since the epoch was read", func(t *testing.T) {
		c := New(cfg, time.Now)
		e := c.Epoch()
		c.Freed(1)
		if err := c.Wait(context.Background(), Queued{Tenant: "a", Epoch: e}); !errors.Is(err, ErrRetry) {
			t.Errorf("Wait: %v, want ErrRetry", err)
		}
		if c.Waiting() != 0 {
			t.Errorf("%d waiting, want none", c.Waiting())
		}
	})
}

// TestEveryWaiterOneOutcome runs many requests through a fleet of a few
// slots from many goroutines, some clients leaving, the config reloaded
// meanwhile: every request is placed or left, none is lost (a lost wakeup
// would leave one waiting with slots free until the watchdog), and the
// queue and the slots end empty.
func TestEveryWaiterOneOutcome(t *testing.T) {
	const (
		slots      = 3
		goroutines = 32
		requests   = 150
	)
	cfg := Config{QueueTimeout: 10 * time.Minute, MaxQueued: 10000, Default: Limits{Weight: 1, MaxQueued: 10000},
		Tenants: map[string]Limits{"a": {Weight: 3, Priority: 5, MaxQueued: 10000}}}
	c := New(cfg, time.Now)
	var inUse, placed, left, over atomic.Int64
	take := func() bool {
		for {
			n := inUse.Load()
			if n >= slots {
				return false
			}
			if inUse.CompareAndSwap(n, n+1) {
				return true
			}
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			tenant := []string{"a", "b", ""}[g%3]
			for range requests {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(10) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(200))*time.Microsecond, cancel)
				}
				for {
					e := c.Epoch()
					if c.Waiting() == 0 && take() {
						break
					}
					err := c.Wait(ctx, Queued{Tenant: tenant, Priority: rng.IntN(3), Tokens: int64(1 + rng.IntN(100)), Epoch: e})
					if errors.Is(err, ErrRetry) {
						continue
					}
					if err == nil {
						if inUse.Add(1) > slots {
							over.Add(1)
						}
						break
					}
					if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
						t.Errorf("Wait: %v, want nil or the context's error", err)
					}
					left.Add(1)
					goto next
				}
				placed.Add(1)
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				}
				inUse.Add(-1)
				c.Freed(1)
			next:
				cancel()
			}
		}()
	}
	stop := make(chan struct{})
	go func() { // reloads meanwhile
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			next := cfg
			if i%2 == 1 {
				next.Tenants = nil
			}
			c.Update(next)
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("requests still waiting after a minute: %d queued, %d slots in use; placed %d, left %d", c.Waiting(), inUse.Load(), placed.Load(), left.Load())
	}
	close(stop)
	if got := placed.Load() + left.Load(); got != goroutines*requests {
		t.Errorf("%d outcomes for %d requests", got, goroutines*requests)
	}
	if c.Waiting() != 0 || inUse.Load() != 0 {
		t.Errorf("at the end: %d queued, %d slots in use", c.Waiting(), inUse.Load())
	}
	t.Logf("placed %d, left %d, placed over the slots after a release raced %d", placed.Load(), left.Load(), over.Load())
}
