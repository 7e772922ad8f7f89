package picker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// eventually polls cond for up to two seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A follower asks the leader over the pick API, and the leader counts the
// follower's requests until they are done.
func TestFollowerAsksTheLeader(t *testing.T) {
	leader, follower := leaderAndFollower(t, 3)

	ctx := context.Background()
	a, err := follower.Pick(ctx, key(follower, "a system prompt and a question"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := leader.Pick(ctx, key(leader, "a system prompt and a question"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Instance().ID != b.Instance().ID {
		t.Errorf("the same key went to %s from the follower and %s from the leader", a.Instance().ID, b.Instance().ID)
	}
	if got := picks(t, follower.opts.Metrics, "picker"); got != 1 {
		t.Errorf("follower: %v picks by the picker, want 1", got)
	}
	if got := picks(t, leader.opts.Metrics, "leader"); got != 1 {
		t.Errorf("leader: %v picks in process, want 1", got)
	}
	l := leader.leading()
	if got := l.policy.InFlight(a.Instance().ID); got != 2 {
		t.Fatalf("the picker counts %d in flight on %s, want 2", got, a.Instance().ID)
	}
	a.Prefilled()
	a.Done()
	b.Done()
	eventually(t, "the picker to release both requests", func() bool { return l.policy.InFlight(a.Instance().ID) == 0 && l.open() == 0 })
}

// TestAnswerNamesOnlyTheInstancesTried: over 256 instances the picker
// answers with the instances a replica tries (Options.Tries), not the
// whole fleet, and the replica's request moves along exactly those.
func TestAnswerNamesOnlyTheInstancesTried(t *testing.T) {
	leader, follower := leaderAndFollower(t, 256)
	k := key(follower, "a system prompt and a question")
	a, err := leader.leading().pick(context.Background(), "router-1", pickRequest{Seq: 1, Key: k}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Order) != testTries {
		t.Fatalf("the answer names %d instances, want %d", len(a.Order), testTries)
	}
	tk, err := follower.Pick(context.Background(), k, Sender{})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done()
	if got := picks(t, follower.opts.Metrics, "picker"); got != 1 {
		t.Fatalf("follower: %v picks by the picker, want 1", got)
	}
	tried := []string{tk.Instance().ID}
	for tk.Next() {
		tried = append(tried, tk.Instance().ID)
	}
	if len(tried) != testTries || tried[0] != a.Order[0] {
		t.Errorf("the request tried %v, want %d instances starting at %s", tried, testTries, a.Order[0])
	}
}

// The pick API answers only callers that sign with the endpoint's key: a
// replica of another endpoint, or anything unsigned, gets 401, learns
// nothing, and counts nothing; the replica with the wrong key routes by
// its fallback.
func TestPickAPIRefusesStrangers(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 3, 10)
	leader, srv := newLeader(t, keys, cfg)

	stranger := testKeys(t, []byte("another endpoint's key, 32 bytes"))
	outsider := newReplica(t, "not-a-sibling", stranger, testConfig(stranger, 3, 10))
	outsider.Follow(strings.TrimPrefix(srv.URL, "http://"))
	tk, err := outsider.Pick(context.Background(), key(outsider, "hello"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	if got := picks(t, outsider.opts.Metrics, "fallback"); got != 1 {
		t.Errorf("the outsider's pick was not a fallback (%v fallbacks)", got)
	}
	for _, path := range []string{PathPick, PathEvents, PathHandoff} {
		resp, err := http.Post(srv.URL+path, "application/octet-stream", bytes.NewReader([]byte{0, 0}))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "vllm") {
			t.Errorf("unsigned %s: %d %q, want 401 and nothing else", path, resp.StatusCode, body)
		}
	}
	// The three unsigned calls, the outsider's pick, and its events
	// (the done it sends for a pick it gave up on) if they came yet.
	if got := counter(leader.opts.Metrics.Refused); got < 4 {
		t.Errorf("%v calls refused, want at least 4", got)
	}
	if n := leader.leading().open(); n != 0 {
		t.Errorf("the picker counts %d requests of strangers", n)
	}
}

// While no picker answers, replicas route by the fallback: the same key to
// the same instance on every replica, each within the threshold by its own
// counts. When a picker answers again it adopts the requests still in
// flight, so its counts are whole.
func TestFallbackThenAdoption(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 5, 2)
	_, srv := newLeader(t, keys, cfg)
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close() // the leader is gone

	a := newReplica(t, "router-1", keys, cfg)
	b := newReplica(t, "router-2", keys, cfg)
	a.Follow(addr)
	b.Follow(addr)
	ctx := context.Background()
	var held []*Ticket
	for i := range 20 {
		text := fmt.Sprintf("conversation %d", i)
		x, err := a.Pick(ctx, key(a, text), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.Pick(ctx, key(b, text), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		if x.Spill != "fallback" || x.Instance().ID != y.Instance().ID {
			t.Fatalf("key %d: %s (%q) on one replica, %s on the other; want one instance by the fallback", i, x.Instance().ID, x.Spill, y.Instance().ID)
		}
		x.Done()
		y.Done()
	}
	for range 6 {
		x, err := a.Pick(ctx, key(a, "one hot key"), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, x)
	}
	per := map[string]int{}
	for _, x := range held {
		per[x.Instance().ID]++
	}
	for id, n := range per {
		if n > 2 {
			t.Errorf("the fallback sent %d of one replica's requests to %s, over the threshold 2", n, id)
		}
	}

	// A new picker comes up: the replica's requests in flight are adopted.
	next := newReplica(t, "router-0", keys, cfg)
	if err := next.Lead(); err != nil {
		t.Fatal(err)
	}
	srv2 := serve(t, next)
	a.Follow(strings.TrimPrefix(srv2.URL, "http://"))
	l := next.leading()
	eventually(t, "adoption of the 6 requests in flight", func() bool { return l.open() == 6 })
	for id, n := range per {
		if got := l.policy.InFlight(id); got != int64(n) {
			t.Errorf("%s: the new picker counts %d, want %d", id, got, n)
		}
	}
	for _, x := range held {
		x.Done()
	}
	eventually(t, "the adopted requests to end", func() bool { return l.open() == 0 })
}

// A leader that steps down hands its state to its successor, which then
// places known keys where the old leader would have (warm); a term that
// already has its predecessor's state, or is too old, refuses another.
func TestHandoff(t *testing.T) {
	handoffTimeout = 30 * time.Second // not under test here; -race is slow
	t.Cleanup(func() { handoffTimeout = 3 * time.Second })
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 7, 100)
	old := newReplica(t, "router-0", keys, cfg)
	if err := old.Lead(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var texts []string
	for i := range 200 {
		text := fmt.Sprintf("document %d: %s", i%40, strings.Repeat("filler ", 20))
		tk, err := old.Pick(ctx, key(old, text), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, text)
		tk.Done()
	}
	oldPolicy := old.leading().policy
	snap := old.stepDown()
	if old.leading() != nil || snap == nil {
		t.Fatal("still leading, or no state, after stepping down")
	}

	successor := newReplica(t, "router-1", keys, cfg)
	srv := serve(t, successor)
	addr := strings.TrimPrefix(srv.URL, "http://")
	var taken atomic.Bool // the Lease, as the old leader reads it
	go func() {
		time.Sleep(150 * time.Millisecond) // the successor takes the Lease...
		taken.Store(true)
		time.Sleep(100 * time.Millisecond)
		successor.startTerm() // ...and starts its term a moment later
	}()
	lease := func(context.Context) (string, error) {
		if taken.Load() {
			return "router-1@" + addr, nil
		}
		return "", nil
	}
	old.handOver(lease, "router-0@somewhere", snap)
	if got := counter(old.opts.Metrics.Handoffs.WithLabelValues("sent", "ok")); got != 1 {
		t.Fatalf("handoffs sent ok: %v", got)
	}
	if got := counter(successor.opts.Metrics.Handoffs.WithLabelValues("received", "restored")); got != 1 {
		t.Fatalf("handoffs restored: %v", got)
	}
	if successor.leading().policy.IndexEntries() != oldPolicy.IndexEntries() {
		t.Fatalf("index entries: %d restored of %d", successor.leading().policy.IndexEntries(), oldPolicy.IndexEntries())
	}
	// A second handoff into the same term is refused.
	if _, err := newReplica(t, "router-2", keys, cfg).call(ctx, addr, PathHandoff, snap); err == nil {
		t.Error("a second handoff was taken")
	}

	// The successor decides the same stream as the old leader would
	// have, had it gone on.
	differ := 0
	for _, text := range texts {
		tk, err := successor.Pick(ctx, key(successor, text), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := oldPolicy.Pick(key(old, text))
		if err != nil {
			t.Fatal(err)
		}
		if tk.Instance().ID != c.Instance().ID {
			differ++
		}
		tk.Done()
		c.Done()
	}
	if differ != 0 {
		t.Errorf("the warm successor placed %d of %d requests elsewhere than the old leader would have", differ, len(texts))
	}
}

// A pick the replica gave up on (its call timed out) may still reach the
// picker; the replica's done for it, sent before, keeps it uncounted, and
// the request is counted where the fallback sent it once adopted.
func TestLatePickIsNotCounted(t *testing.T) {
	keys := testKeys(t, testSecret)
	l, err := newLedger(policy.Tuning{}, func() *policy.Config { c := testConfig(keys, 3, 10); return &c }(), flow.Config{}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p := newReplica(t, "router-1", keys, testConfig(keys, 3, 10))
	k := key(p, "a request whose pick call timed out")
	l.apply("router-1", []event{{Kind: eventDone, Seq: 7}}, now)
	if _, err := l.pick(context.Background(), "router-1", pickRequest{Seq: 7, Key: k}, now); err != nil {
		t.Fatal(err)
	}
	if n := l.open(); n != 0 {
		t.Fatalf("the late pick is counted: %d open", n)
	}
	l.apply("router-1", []event{{Kind: eventAdopt, Seq: 7, Order: []string{"vllm-2"}, Prompt: 10, Prefill: 10}}, now)
	if l.open() != 1 || l.policy.InFlight("vllm-2") != 1 {
		t.Fatalf("the fallback's request is not counted where it went: %d open, %d on vllm-2", l.open(), l.policy.InFlight("vllm-2"))
	}
	var total int64
	for _, id := range []string{"vllm-0", "vllm-1", "vllm-2"} {
		total += l.policy.InFlight(id)
	}
	if total != 1 {
		t.Fatalf("%d in flight in all, want 1", total)
	}
}

// A request this replica decided as the picker is released in its own
// ledger by the time Done returns, so the next pick finds the slot free:
// a sequential client on a full fleet is never refused by its own last
// request. Repeated, since the sender goroutine could win a single try.
func TestLeaderReleasesItsOwnAtOnce(t *testing.T) {
	keys := testKeys(t, testSecret)
	leader, _ := newLeader(t, keys, testConfig(keys, 1, 1))
	l := leader.leading()
	for i := range 200 {
		c, err := leader.Pick(context.Background(), key(leader, "a prompt"), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		c.Prefilled()
		c.Done()
		if n := l.open(); n != 0 {
			t.Fatalf("pick %d: the ledger still counts %d in flight after Done", i, n)
		}
	}
}
