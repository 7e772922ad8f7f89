package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

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

func testWarmJoiner(t *testing.T, warm bool) {
	sims := map[string]*vllmsim.Server{}
	addrs := map[string]string{}
	for i := range 3 {
		sim, err := vllmsim.Start(vllmsim.Config{Listen: "127.0.0.1:0", Model: "m", TimeScale: 0.001})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sim.Close() })
		id := fmt.Sprintf("vllm-%d", i)
		sims[id], addrs[id] = sim, sim.Addr()
	}
	r := New(Options{AllowLoopbackBackends: true, Tuning: policy.Tuning{NoWarm: !warm}})
	apply := func(ids ...string) {
		in := map[string]string{}
		for _, id := range ids {
			in[id] = addrs[id]
		}
		if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, in)); err != nil {
			t.Fatal(err)
		}
	}
	apply("vllm-0", "vllm-1")
	base := newServer(t, r)

	const keys, maxTokens = 40, 8
	prompts := make([]string, keys)
	for i := range prompts {
		prompts[i] = strings.Repeat(fmt.Sprintf("conversation %d: the system prompt of this assistant. ", i), 25)
	}
	sent := 0
	// send asks for every prompt once and returns how many responses
	// were cache misses; each response must be the user's own.
	send := func() (misses int) {
		for _, p := range prompts {
			resp, out := postURL(t, base+"/v1/chat/completions", chatBody("m", p, fmt.Sprintf(`,"max_tokens":%d`, maxTokens)))
			sent++
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			u := usageOf(t, out)
			if u.CompletionTokens != maxTokens {
				t.Fatalf("a user got %d tokens, want %d: %s", u.CompletionTokens, maxTokens, out)
			}
			if u.PromptTokensDetails.CachedTokens == 0 {
				misses++
			}
		}
		return misses
	}
	m := r.Metrics()
	warmed := func() (ok, failed float64) {
		return counterValue(m.WarmRequests.WithLabelValues("ok")), counterValue(m.WarmRequests.WithLabelValues("error"))
	}
	// settle waits for the copies in flight to finish: every instance idle
	// and every request it finished accounted for, by users or copies.
	settle := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var done int64
			idle := true
			for _, s := range sims {
				st := s.Stats()
				done += st.Requests
				idle = idle && st.Running+st.Waiting == 0
			}
			ok, failed := warmed()
			if idle && done == int64(sent)+int64(ok+failed) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("copies did not settle: %d finished, %d sent, %v+%v copies", done, sent, ok, failed)
			}
		}
	}
	send()
	send()
	if misses := send(); misses != 0 {
		t.Fatalf("the fleet of two missed %d of %d repeated prompts", misses, keys)
	}

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
	if got := requestsTotal(t, r); got != float64(sent) {
		t.Errorf("requests_total %v, want the %d user requests only", got, sent)
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
