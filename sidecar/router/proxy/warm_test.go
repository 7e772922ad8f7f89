package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// TestWarmJoiner runs the router before simulated vLLM instances, whose
// prefix cache reports cached tokens as vLLM's does: a fleet of two under
// repeated-prefix traffic, then a third instance joins. With warming, the
// keys whose first choice it is stay home (every user response is a
// cache hit), the joiner gets one-token copies of them, and their next
// requests go to it and hit its cache; the copies are not in the
// router's request counts, no user sees a copy's answer, and the copies
// stay within their bounds. Without warming (the control), the same keys
// move to the joiner cold: misses.
func TestWarmJoiner(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("warm=%v", on), func(t *testing.T) { testWarmJoiner(t, on) })
	}
}

// warmFleet is a router before simulated vLLM instances vllm-0..n-1 and
// the repeated-prefix traffic the warming tests send it.
type warmFleet struct {
	t       *testing.T
	r       *Router
	base    string
	sims    map[string]*vllmsim.Server
	addrs   map[string]string
	prompts []string
	sent    int
}

const warmKeys, warmMaxTokens = 40, 8

func newWarmFleet(t *testing.T, n int, warm bool, ids ...string) *warmFleet {
	f := &warmFleet{t: t, sims: map[string]*vllmsim.Server{}, addrs: map[string]string{}}
	for i := range n {
		sim, err := vllmsim.Start(vllmsim.Config{Listen: "127.0.0.1:0", Model: "m", TimeScale: 0.001})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sim.Close() })
		id := fmt.Sprintf("vllm-%d", i)
		f.sims[id], f.addrs[id] = sim, sim.Addr()
	}
	f.r = New(Options{AllowLoopbackBackends: true, Tuning: policy.Tuning{NoWarm: !warm}})
	f.apply(nil, ids...)
	f.base = newServer(t, f.r)
	f.prompts = make([]string, warmKeys)
	for i := range f.prompts {
		f.prompts[i] = strings.Repeat(fmt.Sprintf("conversation %d: the system prompt of this assistant. ", i), 25)
	}
	return f
}

// apply installs a document of the instances ids, those in draining
// marked so.
func (f *warmFleet) apply(draining []string, ids ...string) {
	f.t.Helper()
	d := document(routingv1alpha1.StrategyPrefixAware, nil)
	for _, id := range ids {
		d.Instances = append(d.Instances, routingv1alpha1.Instance{ID: id, Address: f.addrs[id], Draining: slices.Contains(draining, id)})
	}
	if err := f.r.Apply(d); err != nil {
		f.t.Fatal(err)
	}
}

// send asks for every prompt once and returns how many responses were
// cache misses; each response must be the user's own.
func (f *warmFleet) send() (misses int) {
	t := f.t
	t.Helper()
	for _, p := range f.prompts {
		resp, out := postURL(t, f.base+"/v1/chat/completions", chatBody("m", p, fmt.Sprintf(`,"max_tokens":%d`, warmMaxTokens)))
		f.sent++
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		u := usageOf(t, out)
		if u.CompletionTokens != warmMaxTokens {
			t.Fatalf("a user got %d tokens, want %d: %s", u.CompletionTokens, warmMaxTokens, out)
		}
		if u.PromptTokensDetails.CachedTokens == 0 {
			misses++
		}
	}
	return misses
}

// warmed is the warm copies answered and failed so far.
func (f *warmFleet) warmed() (ok, failed float64) {
	m := f.r.Metrics()
	return counterValue(m.WarmRequests.WithLabelValues("ok")), counterValue(m.WarmRequests.WithLabelValues("error"))
}

// settle waits for the copies in flight to finish: every instance idle
// and every request it finished accounted for, by users or copies.
func (f *warmFleet) settle() {
	t := f.t
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var done int64
		idle := true
		for _, s := range f.sims {
			st := s.Stats()
			done += st.Requests
			idle = idle && st.Running+st.Waiting == 0
		}
		ok, failed := f.warmed()
		if idle && done == int64(f.sent)+int64(ok+failed) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("copies did not settle: %d finished, %d sent, %v+%v copies", done, f.sent, ok, failed)
		}
	}
}

// steady sends the prompts until a round of them all hit.
func (f *warmFleet) steady() {
	f.t.Helper()
	f.send()
	f.send()
	if misses := f.send(); misses != 0 {
		f.t.Fatalf("the fleet missed %d of %d repeated prompts", misses, warmKeys)
	}
}

func testWarmJoiner(t *testing.T, warm bool) {
	f := newWarmFleet(t, 3, warm, "vllm-0", "vllm-1")
	r, sims, m := f.r, f.sims, f.r.Metrics()
	const keys, maxTokens = warmKeys, warmMaxTokens
	send, settle, warmed := f.send, f.settle, f.warmed
	apply := func(ids ...string) { f.apply(nil, ids...) }
	f.steady()

	apply("vllm-0", "vllm-1", "vllm-2")
	joiner := sims["vllm-2"]
	before := joiner.Stats()
	misses := send()
	settle()
	ok, failed := warmed()
	cold := counterValue(m.KeyMoves.WithLabelValues(policy.MoveJoining))
	during := joiner.Stats()
	t.Logf("moves: share %v holder_left %v; spills %v %v; cold placements %v", counterValue(m.KeyMoves.WithLabelValues(policy.MoveShare)), counterValue(m.KeyMoves.WithLabelValues(policy.MoveHolderLeft)), counterValue(m.Spills.WithLabelValues(policy.SpillConcurrency)), counterValue(m.Spills.WithLabelValues(policy.SpillTokens)), counterValue(m.ColdPlacements))
	t.Logf("warm=%v, joining round: %d misses, %v copies answered, %v failed, %v cold moves; joiner finished %d requests, %d generated tokens, at most %d in flight",
		warm, misses, ok, failed, cold, during.Requests-before.Requests, during.GenerationTokens-before.GenerationTokens, during.MaxInFlight)
	if !warm {
		if ok+failed != 0 || cold == 0 || misses == 0 {
			t.Fatalf("warming off: %v copies, %v cold moves, %d misses; want none, some, some", ok+failed, cold, misses)
		}
		return
	}
	if ok == 0 || failed != 0 {
		t.Fatalf("%v copies answered, %v failed; want some, none", ok, failed)
	}
	// Only keys moved cold (past a bound) miss; the joiner saw the copies
	// (one token each) and those cold users' requests (maxTokens each).
	if float64(misses) != cold {
		t.Errorf("%d misses in the joining round, want the %v keys moved cold", misses, cold)
	}
	if got, want := during.Requests-before.Requests, int64(ok+cold); got != want {
		t.Errorf("the joiner finished %d requests, want %d copies + cold moves", got, want)
	}
	if got, want := during.GenerationTokens-before.GenerationTokens, int64(ok)+int64(cold)*maxTokens; got != want {
		t.Errorf("the joiner generated %d tokens, want 1 per copy and %d per cold move: %d", got, maxTokens, want)
	}
	if during.MaxInFlight > 4+1 {
		t.Errorf("the joiner had %d requests in flight, want at most 4 copies and one user's", during.MaxInFlight)
	}
	if tokens := counterValue(m.WarmPromptTokens); tokens <= 0 || tokens > 1<<18 {
		t.Errorf("%v warm prompt tokens, want within (0, 2^18]", tokens)
	}
	// The warmed keys now live on the joiner, cached.
	if misses := send(); misses != 0 {
		t.Errorf("%d of %d prompts missed after warming", misses, keys)
	}
	after := joiner.Stats()
	if after.Requests-during.Requests < int64(ok) {
		t.Errorf("the joiner served %d requests after warming, want at least the %v warmed keys", after.Requests-during.Requests, ok)
	}
	if q, h := after.PrefixCacheQueries-during.PrefixCacheQueries, after.PrefixCacheHits-during.PrefixCacheHits; h == 0 || float64(h) < 0.8*float64(q) {
		t.Errorf("the joiner hit %d of %d prompt tokens after warming, want at least 80 %%", h, q)
	}
	if got := requestsTotal(t, r); got != float64(f.sent) {
		t.Errorf("requests_total %v, want the %d user requests only", got, f.sent)
	}
}

// TestWarmDrainer: a fleet of three under repeated-prefix traffic, then
// vllm-2 drains (the document marks it) and later leaves it. With
// warming, the keys it held are served there while it drains (hits), each
// sending its next owner a one-token copy, and after it leaves they hit
// on their next owners; no new key goes to the drainer. Without warming
// (the control), its keys move to their next owners cold as soon as it
// drains: misses.
func TestWarmDrainer(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("warm=%v", on), func(t *testing.T) { testWarmDrainer(t, on) })
	}
}

func testWarmDrainer(t *testing.T, warm bool) {
	f := newWarmFleet(t, 3, warm, "vllm-0", "vllm-1", "vllm-2")
	m := f.r.Metrics()
	drainer := f.sims["vllm-2"]
	f.send()
	f.send()
	before := drainer.Stats()
	if misses := f.send(); misses != 0 {
		t.Fatalf("the fleet missed %d of %d repeated prompts", misses, warmKeys)
	}
	held := drainer.Stats().Requests - before.Requests
	if held == 0 {
		t.Fatal("vllm-2 held no keys")
	}

	f.apply([]string{"vllm-2"}, "vllm-0", "vllm-1", "vllm-2")
	before = drainer.Stats()
	draining := f.send()
	f.settle()
	served := drainer.Stats().Requests - before.Requests
	ok, failed := f.warmed()
	cold := counterValue(m.KeyMoves.WithLabelValues(policy.MoveHolderLeft))
	// Before the drainer leaves, which drops its series.
	if got := testutil.ToFloat64(m.BackendDraining.WithLabelValues("vllm-2")); got != 1 {
		t.Errorf("backend_draining of vllm-2 %v while it drains, want 1", got)
	}
	if got := testutil.ToFloat64(m.BackendDraining.WithLabelValues("vllm-0")); got != 0 {
		t.Errorf("backend_draining of vllm-0 %v, want 0", got)
	}
	if got := requestsTotal(t, f.r); got != float64(f.sent) {
		t.Errorf("requests_total %v, want the %d user requests only", got, f.sent)
	}

	f.apply(nil, "vllm-0", "vllm-1")
	left := f.send()
	t.Logf("warm=%v: vllm-2 held %d of %d keys; while it drained %d misses, it served %d, %v copies answered, %v failed, %v cold moves; after it left %d misses",
		warm, held, warmKeys, draining, served, ok, failed, cold, left)
	if left != 0 {
		t.Errorf("%d of %d prompts missed after the drainer left, want none", left, warmKeys)
	}
	if !warm {
		if ok+failed != 0 || served != 0 || int64(draining) != held || cold != float64(held) {
			t.Fatalf("warming off: %v copies, the drainer served %d, %d misses, %v cold moves; want none, none, and its %d keys moved cold", ok+failed, served, draining, cold, held)
		}
		return
	}
	// Only keys moved cold (past a bound) miss; the drainer served the
	// others and no new key, and each of those sent one copy.
	if failed != 0 || float64(draining) != cold || served != held-int64(cold) || ok != float64(served) {
		t.Errorf("while draining: %v copies answered, %v failed, %d misses, %v cold moves, the drainer served %d of its %d keys; want a copy for each it served, no failure, misses only for cold moves",
			ok, failed, draining, cold, served, held)
	}
	if ok == 0 {
		t.Error("no key was warmed on its next owner")
	}
}

// requestsTotal sums warmroute_router_requests_total over its labels.
func requestsTotal(t *testing.T, r *Router) float64 {
	t.Helper()
	fams, err := r.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() == "warmroute_router_requests_total" {
			for _, mt := range f.GetMetric() {
				n += mt.GetCounter().GetValue()
			}
		}
	}
	return n
}
