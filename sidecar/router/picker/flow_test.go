package picker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmroute/warmroute/sidecar/router/flow"
)

// flowPair is a leader and a follower over one instance with a threshold
// of 1, under fc.
func flowPair(t *testing.T, fc flow.Config) (leader, follower *Picker) {
	t.Helper()
	return flowFleet(t, fc, 1, 1)
}

// flowFleet is a leader and a follower over n instances with threshold.
func flowFleet(t *testing.T, fc flow.Config, n, threshold int) (leader, follower *Picker) {
	t.Helper()
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, n, threshold)
	leader = newReplica(t, "router-0", keys, cfg)
	leader.SetFlow(fc)
	if err := leader.Lead(); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, leader)
	follower = newReplica(t, "router-1", keys, cfg)
	follower.SetFlow(fc)
	follower.Follow(strings.TrimPrefix(srv.URL, "http://"))
	return leader, follower
}

func queueConfig() flow.Config {
	return flow.Config{Default: flow.Limits{Weight: 1, MaxQueued: 10}, QueueTimeout: 30 * time.Second, MaxQueued: 100,
		Tenants: map[string]flow.Limits{
			"gold":  {Weight: 1, Priority: 100, MaxQueued: 10},
			"batch": {Weight: 1, Priority: -100, MaxQueued: 1},
		}}
}

type picked struct {
	tk  *Ticket
	err error
}

func pickAsync(p *Picker, text string, s Sender) <-chan picked {
	out := make(chan picked, 1)
	go func() {
		tk, err := p.Pick(context.Background(), key(p, text), s)
		out <- picked{tk, err}
	}()
	return out
}

// A follower's request that finds the instance full waits in the leader's
// queue (its pick call stays open) and is placed when the instance frees;
// the queue serves the higher priority first, whichever replica asked.
func TestQueueAcrossReplicas(t *testing.T) {
	leader, follower := flowPair(t, queueConfig())
	l := leader.leading()

	first, err := follower.Pick(context.Background(), key(follower, "fills the only slot"), Sender{Tenant: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	batch := pickAsync(follower, "a batch request", Sender{Tenant: "batch"})
	eventually(t, "the batch request to queue", func() bool { return l.flow.Waiting() == 1 })
	gold := pickAsync(leader, "an interactive request", Sender{Tenant: "gold"})
	eventually(t, "the gold request to queue", func() bool { return l.flow.Waiting() == 2 })

	first.Done()
	g := <-gold
	if g.err != nil {
		t.Fatalf("gold: %v", g.err)
	}
	select {
	case b := <-batch:
		t.Fatalf("the batch request was placed (%v) before the gold one ended", b.err)
	case <-time.After(50 * time.Millisecond):
	}
	g.tk.Done()
	b := <-batch
	if b.err != nil {
		t.Fatalf("batch: %v", b.err)
	}
	b.tk.Done()
	eventually(t, "the picker to count nothing in flight", func() bool { return l.open() == 0 })
	if got := testutil.ToFloat64(leader.opts.Metrics.Flow.Queued.WithLabelValues("batch")); got != 0 {
		t.Errorf("queued{batch} = %v after both were placed, want 0", got)
	}
}

// Refusals reach the replica that asked as the same values the leader's
// own requests get: a tenant's queue bound (429) and its rate limit (429
// with its windows).
func TestRefusalsOverThePickAPI(t *testing.T) {
	cfg := queueConfig()
	cfg.Tenants["metered"] = flow.Limits{Weight: 1, RequestsPerMinute: 2, MaxQueued: 5}
	leader, follower := flowPair(t, cfg)
	l := leader.leading()

	busy, err := follower.Pick(context.Background(), key(follower, "fills the only slot"), Sender{Tenant: "gold"})
	if err != nil {
		t.Fatal(err)
	}
	queued := pickAsync(follower, "one batch request may wait", Sender{Tenant: "batch"})
	eventually(t, "the batch request to queue", func() bool { return l.flow.Waiting() == 1 })
	_, err = follower.Pick(context.Background(), key(follower, "a second may not"), Sender{Tenant: "batch"})
	var ref *flow.Refusal
	if !errors.As(err, &ref) || ref.Reason != flow.ReasonTenantQueueFull || ref.Tenant != "batch" || ref.RetryAfter < time.Second {
		t.Fatalf("second batch request: %v, want a tenant_queue_full refusal with a Retry-After", err)
	}
	busy.Done()
	if q := <-queued; q.err != nil {
		t.Fatal(q.err)
	} else {
		q.tk.Done()
	}

	for i := range 2 {
		tk, err := follower.Pick(context.Background(), key(follower, fmt.Sprint("metered ", i)), Sender{Tenant: "metered"})
		if err != nil {
			t.Fatalf("metered request %d: %v", i, err)
		}
		tk.Done()
		eventually(t, "the request to end", func() bool { return l.open() == 0 })
	}
	_, err = follower.Pick(context.Background(), key(follower, "metered 3"), Sender{Tenant: "metered"})
	var lim *flow.Limited
	if !errors.As(err, &lim) || lim.Reason != flow.ReasonRequests || lim.Requests.Limit != 2 || lim.Requests.Remaining != 0 || lim.RetryAfter <= 0 {
		t.Fatalf("third metered request: %v, want a requests limit of 2 with 0 remaining", err)
	}
	if got := testutil.ToFloat64(leader.opts.Metrics.Flow.RateLimited.WithLabelValues("metered", "requests")); got != 1 {
		t.Errorf("rate_limited_total{metered,requests} = %v, want 1", got)
	}
	if definite(errNotLeader) || !definite(lim) || !definite(ref) {
		t.Error("definite tells flow control's answers from failed calls wrongly")
	}
}

// A queued request whose client leaves leaves the queue at once, on the
// leader, and is not counted there.
func TestQueuedClientLeaves(t *testing.T) {
	leader, follower := flowPair(t, queueConfig())
	l := leader.leading()
	busy, err := follower.Pick(context.Background(), key(follower, "fills the only slot"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := follower.Pick(ctx, key(follower, "a client about to leave"), Sender{})
		done <- err
	}()
	eventually(t, "the request to queue", func() bool { return l.flow.Waiting() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Pick = %v, want context.Canceled", err)
	}
	eventually(t, "the leader to drop the request from its queue", func() bool { return l.flow.Waiting() == 0 })
	busy.Done()
	eventually(t, "the picker to count nothing in flight", func() bool { return l.open() == 0 })
}

// Tokens a request used, reported with its end, settle its tenant's token
// limit: a request that used less than estimated gives the rest back.
func TestUsageSettlesTokens(t *testing.T) {
	cfg := queueConfig()
	cfg.Tenants["metered"] = flow.Limits{Weight: 1, TokensPerMinute: 1000, MaxQueued: 5}
	leader, follower := flowPair(t, cfg)
	l := leader.leading()
	text := strings.Repeat("a long prompt that is estimated at many tokens ", 60) // ~700 tokens
	for i := range 3 {
		tk, err := follower.Pick(context.Background(), key(follower, fmt.Sprint(i, text)), Sender{Tenant: "metered"})
		if err != nil {
			t.Fatalf("request %d: %v (each used 10 tokens, so three fit in 1000)", i, err)
		}
		tk.Used(10)
		tk.Done()
		eventually(t, "the request to end", func() bool { return l.open() == 0 })
	}
	if got := testutil.ToFloat64(leader.opts.Metrics.Flow.AdmittedTokens.WithLabelValues("metered")); got != 30 {
		t.Errorf("admitted_tokens_total{metered} = %v, want 30", got)
	}
}

// Nothing queued is lost when the picker changes or its configuration
// does: a reload keeps the queue, and a leader that steps down places
// what waits at once (the next picker adopts those requests).
func TestQueuedSurviveReloadAndStepDown(t *testing.T) {
	leader, follower := flowPair(t, queueConfig())
	l := leader.leading()
	busy, err := follower.Pick(context.Background(), key(follower, "fills the only slot"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Done()
	local := pickAsync(leader, "the leader's own waits", Sender{Tenant: "gold"})
	remote := pickAsync(follower, "a follower's waits", Sender{Tenant: "gold"})
	eventually(t, "both to queue", func() bool { return l.flow.Waiting() == 2 })

	cfg := queueConfig()
	cfg.Tenants["gold"] = flow.Limits{Weight: 2, Priority: 50, MaxQueued: 10}
	leader.SetFlow(cfg)
	if got := l.flow.Waiting(); got != 2 {
		t.Fatalf("%d queued after a reload, want 2", got)
	}

	leader.stepDown()
	for name, ch := range map[string]<-chan picked{"local": local, "remote": remote} {
		select {
		case p := <-ch:
			if p.err != nil {
				t.Fatalf("%s: %v, want placed", name, p.err)
			}
			p.tk.Done()
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still waiting after the leader stepped down", name)
		}
	}
}

// A queued request may wait longer than the pick port's read and write
// timeouts, which bound a stalled caller, not a waiting one.
func TestWaitOutlastsThePortTimeouts(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 1, 1)
	leader := newReplica(t, "router-0", keys, cfg)
	leader.SetFlow(queueConfig())
	if err := leader.Lead(); err != nil {
		t.Fatal(err)
	}
	lim := defaultServerLimits
	lim.readHeader, lim.read, lim.write = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	srv := serveWith(t, leader.server("", lim, nil))
	follower := newReplica(t, "router-1", keys, cfg)
	follower.Follow(strings.TrimPrefix(srv.URL, "http://"))

	busy, err := follower.Pick(context.Background(), key(follower, "fills the only slot"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	waiting := pickAsync(follower, "waits past the timeouts", Sender{})
	eventually(t, "the request to queue", func() bool { return leader.leading().flow.Waiting() == 1 })
	time.Sleep(400 * time.Millisecond)
	busy.Done()
	p := <-waiting
	if p.err != nil {
		t.Fatalf("a request queued past the port's timeouts: %v, want placed", p.err)
	}
	p.tk.Done()
	if got := picks(t, follower.opts.Metrics, "fallback"); got != 0 {
		t.Fatalf("%v requests routed by the fallback: the wait call did not last", got)
	}
}

// The picker keeps headroom for a higher priority's recent peak: a batch
// request waits although an instance has room, an interactive one passes
// it, and once the fleet is idle the batch request goes.
func TestHeadroomThroughThePicker(t *testing.T) {
	leader, _ := flowFleet(t, queueConfig(), 3, 2) // 6 slots
	l := leader.leading()
	pick := func(text string, s Sender) *Ticket {
		t.Helper()
		tk, err := leader.Pick(context.Background(), key(leader, text), s)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		return tk
	}
	var gold []*Ticket
	for i := range 3 {
		gold = append(gold, pick(fmt.Sprintf("interactive %d", i), Sender{Tenant: "gold"}))
	}
	gold[0].Done()
	gold[1].Done() // gold's peak 3 and its margin 2, 1 running: 5 free, 4 owed to gold
	batch := pick("batch 0", Sender{Tenant: "batch"})
	held := pickAsync(leader, "batch 1", Sender{Tenant: "batch"})
	eventually(t, "the second batch request to wait for gold's headroom", func() bool { return l.flow.Waiting() == 1 })
	if room, _ := l.policy.Room(); room != 4 {
		t.Fatalf("room %d, want 4: the batch request waits with room left", room)
	}
	pick("interactive 3", Sender{Tenant: "gold"}).Done()
	select {
	case b := <-held:
		t.Fatalf("the held batch request was placed (%v) while gold's headroom stood", b.err)
	case <-time.After(50 * time.Millisecond):
	}
	gold[2].Done()
	batch.Done() // an idle fleet serves whoever waits
	b := <-held
	if b.err != nil {
		t.Fatalf("held batch: %v", b.err)
	}
	b.tk.Done()
}
