package policy

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmroute/warmroute/api/hrw"
	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

func instancesOf(n int) []Instance {
	out := make([]Instance, n)
	for i := range out {
		out[i] = Instance{ID: fmt.Sprintf("vllm-%d", i), Address: fmt.Sprintf("10.0.0.%d:8000", i+1)}
	}
	return out
}

func newPolicy(t testing.TB, s Strategy, n int, tune Tuning) *Policy {
	t.Helper()
	tune.BenchmarkStrategies = true
	p := New(tune)
	if err := p.Update(Config{Strategy: s, Model: "m", HashSeed: 42, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: instancesOf(n),
		Adapters: map[string][]string{"lora-a": {"vllm-1", "vllm-3"}, "lora-empty": nil}}); err != nil {
		t.Fatal(err)
	}
	return p
}

func textReq(s string) Request { return Request{Text: []byte(s), WindowBytes: min(len(s), 4096)} }

func pick(t testing.TB, p *Policy, r Request) *Choice {
	t.Helper()
	c, err := p.Pick(p.Key(r))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// placedOn is where the strategy would place req before the overload
// guard, deciding without counting or learning anything (decide only
// computes: Pick records).
func placedOn(t testing.TB, p *Policy, r Request) string {
	t.Helper()
	tb := p.table.Load()
	allowed, err := tb.Candidates(r.Model)
	if err != nil {
		t.Fatal(err)
	}
	d := tb.strategy(p, p.look(tb), p.Key(r), allowed)
	return tb.Members[d.placed].ID
}

func randomText(r *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz      "
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

// testedStrategies are the strategies every strategy test runs: the
// routing document's, and the benchmark baseline in builds with the
// benchstrategies tag (baseline_test.go).
var testedStrategies = []Strategy{Random, LeastOutstandingRequests, PrefixAware}

func TestModelResolution(t *testing.T) {
	for _, s := range testedStrategies {
		p := newPolicy(t, s, 5, Tuning{})
		for _, tc := range []struct {
			model   string
			err     error
			allowed []string
		}{
			{"", nil, nil},
			{"m", nil, nil},
			{"lora-a", nil, []string{"vllm-1", "vllm-3"}},
			{"lora-empty", ErrNoInstance, nil},
			{"nope", ErrUnknownModel, nil},
		} {
			for i := range 50 {
				c, err := p.Pick(p.Key(Request{Model: tc.model, Text: fmt.Appendf(nil, "prompt %d", i), WindowBytes: 10}))
				if !errors.Is(err, tc.err) {
					t.Fatalf("%s model %q: err %v, want %v", s, tc.model, err, tc.err)
				}
				if err != nil {
					continue
				}
				if tc.allowed != nil && !containsID(tc.allowed, c.Instance().ID) {
					t.Fatalf("%s model %q went to %s, outside the adapter set", s, tc.model, c.Instance().ID)
				}
				c.Done()
			}
		}
	}
}

func containsID(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestStrategiesSpread(t *testing.T) {
	for _, tc := range []struct {
		s        Strategy
		maxRatio float64
	}{
		{Random, 1.15},
		{LeastOutstandingRequests, 1.15},
		{PrefixAware, 1.08},
	} {
		t.Run(string(tc.s), func(t *testing.T) { checkSpread(t, tc.s, tc.maxRatio) })
	}
}

// checkSpread sends 20,000 distinct prefixes to 7 instances and requires
// the busiest's share within maxRatio × the average.
func checkSpread(t *testing.T, s Strategy, maxRatio float64) {
	p := newPolicy(t, s, 7, Tuning{})
	r := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	const n = 20000
	for range n {
		c := pick(t, p, textReq(randomText(r, 300)))
		counts[c.Instance().ID]++
		c.Done()
	}
	got := maxOverAvg(counts, 7)
	t.Logf("%s: max/avg share %.3f over 7 instances, 20000 distinct prefixes", s, got)
	if got > maxRatio {
		t.Fatalf("max/avg share %.3f > %.2f: %v", got, maxRatio, counts)
	}
}

func maxOverAvg(counts map[string]int, n int) float64 {
	total, most := 0, 0
	for _, c := range counts {
		total += c
		most = max(most, c)
	}
	return float64(most) / (float64(total) / float64(n))
}

func TestLeastOutstandingPicksIdle(t *testing.T) {
	p := newPolicy(t, LeastOutstandingRequests, 3, Tuning{})
	held := []*Choice{}
	for range 6 {
		held = append(held, pick(t, p, textReq("x")))
	}
	for _, in := range p.Instances() {
		if got := p.InFlight(in.ID); got != 2 {
			t.Fatalf("%s has %d in flight, want 2 (evenly spread)", in.ID, got)
		}
	}
	held[0].Done()
	idle := held[0].Instance().ID
	if c := pick(t, p, textReq("x")); c.Instance().ID != idle {
		t.Fatalf("picked %s, want the least loaded %s", c.Instance().ID, idle)
	}
}

func TestPrefixAffinityAndIsolation(t *testing.T) {
	p := newPolicy(t, PrefixAware, 8, Tuning{})
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		base := randomText(r, 2000)
		first := pick(t, p, textReq(base+" question one"))
		first.Done()
		again := pick(t, p, textReq(base+" another, different question"))
		again.Done()
		if first.Instance().ID != again.Instance().ID {
			t.Fatalf("key %d: requests sharing 2000 chars went to %s and %s", i, first.Instance().ID, again.Instance().ID)
		}
	}
	// The same text for different tenants or adapters is placed
	// independently: over many prompts, they must not always coincide.
	same := 0
	for range 400 {
		text := randomText(r, 1000)
		a := pick(t, p, Request{Text: []byte(text), WindowBytes: len(text), Tenant: "alice"})
		b := pick(t, p, Request{Text: []byte(text), WindowBytes: len(text), Tenant: "bob"})
		a.Done()
		b.Done()
		if a.Instance().ID == b.Instance().ID {
			same++
		}
	}
	if same > 400/8*2 {
		t.Fatalf("tenants coincided on %d/400 prompts: not independent", same)
	}
}

// TestDominantPrefixDoesNotMakeAHotSpot sends a system prompt shared by
// every request (shorter and longer than the window) followed by one of many
// users' conversations, and checks both the spread and per-user affinity.
func TestDominantPrefixDoesNotMakeAHotSpot(t *testing.T) {
	for _, systemLen := range []int{3000, 12000} {
		t.Run(fmt.Sprintf("system=%d", systemLen), func(t *testing.T) {
			p := newPolicy(t, PrefixAware, 7, Tuning{})
			r := rand.New(rand.NewPCG(5, 6))
			system := randomText(r, systemLen)
			users := make([]string, 300)
			for i := range users {
				users[i] = randomText(r, 400)
			}
			home := map[int]string{}
			counts := map[string]int{}
			moved, total := 0, 0
			for turn := range 12000 {
				u := r.IntN(len(users))
				text := system + users[u] + fmt.Sprintf(" turn %d", turn)
				c := pick(t, p, Request{Text: []byte(text), WindowBytes: min(len(text), 4096)})
				c.Done()
				id := c.Instance().ID
				if turn > 2000 {
					counts[id]++
					total++
					if h, ok := home[u]; ok && h != id {
						moved++
					}
				}
				home[u] = id
			}
			got := maxOverAvg(counts, 7)
			t.Logf("max/avg share %.3f; %.2f%% of follow-up turns changed instance", got, 100*float64(moved)/float64(total))
			if got > 1.10 {
				t.Fatalf("max/avg share %.3f with a shared system prompt: %v", got, counts)
			}
			if frac := float64(moved) / float64(total); frac > 0.02 {
				t.Fatalf("%.1f%% of follow-up turns changed instance", 100*frac)
			}
		})
	}
}

func TestOverloadGuardSpillsAlongOwnOrder(t *testing.T) {
	// ReplicaLoad so high that the hot key is never replicated on purpose:
	// this tests the guard alone.
	p := newPolicy(t, PrefixAware, 6, Tuning{ShareSlack: -1, ReplicaLoad: 1e9})
	req := textReq(strings.Repeat("hot prefix ", 300))
	var held []*Choice
	for range 10 { // fill the preferred instance up to the threshold
		c := pick(t, p, req)
		if c.Spill != SpillNone {
			t.Fatalf("spilled before the threshold: %s", c.Spill)
		}
		held = append(held, c)
	}
	preferred := held[0].Instance().ID
	var second string
	for i := range 2 { // within the bounded-load cap of the second choice
		c := pick(t, p, req)
		if c.Spill != SpillConcurrency {
			t.Fatalf("spill %d: reason %q, want %q", i, c.Spill, SpillConcurrency)
		}
		if c.Instance().ID == preferred {
			t.Fatal("spilled onto the full instance")
		}
		if second == "" {
			second = c.Instance().ID
		} else if c.Instance().ID != second {
			t.Fatalf("spills went to %s and %s; a hot key must spill onto one second choice", second, c.Instance().ID)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Done()
	}
	if c := pick(t, p, req); c.Instance().ID != preferred || c.Spill != SpillNone {
		t.Fatalf("after load drained: %s (%q), want %s", c.Instance().ID, c.Spill, preferred)
	}
}

// TestOverloadGuardAllBusyGoesLeastLoaded: with every instance at or over
// the threshold, a request stays on the instance its key was placed on
// while that one has at most overflowStay more in flight than the least
// loaded, and otherwise goes to the one with the fewest in flight (here
// the only one within a request of the least), counted as an all-busy
// spill either way.
func TestOverloadGuardAllBusyGoesLeastLoaded(t *testing.T) {
	const threshold = 10 // newPolicy's ConcurrencyThreshold
	p := newPolicy(t, PrefixAware, 3, Tuning{ShareSlack: -1})
	held := map[string][]*Choice{}
	leastHeld := func(except string) int {
		least := -1
		for _, in := range p.Instances() {
			if n := len(held[in.ID]); in.ID != except && (least < 0 || n < least) {
				least = n
			}
		}
		return least
	}
	for i := 0; leastHeld("") < threshold+4; i++ {
		if i == 1000 {
			t.Fatalf("fillers never got every instance to %d in flight: %v", threshold+4, inFlightByID(p))
		}
		c := pick(t, p, textReq(fmt.Sprintf("filler %d", i)))
		held[c.Instance().ID] = append(held[c.Instance().ID], c)
	}
	// Every instance at exactly threshold+4.
	drop := func(id string, to int) {
		for len(held[id]) > to {
			held[id][0].Done()
			held[id] = held[id][1:]
		}
	}
	for _, in := range p.Instances() {
		drop(in.ID, threshold+4)
	}
	quiet := p.Instances()[1].ID
	// Keys placed elsewhere: within overflowStay of the quiet instance,
	// they stay where they were placed.
	var key Request
	for i := 0; ; i++ {
		key = textReq(fmt.Sprintf("new key %d", i))
		if placedOn(t, p, key) != quiet {
			break
		}
	}
	drop(quiet, threshold+4-overflowStay)
	before := inFlightByID(p)
	home := placedOn(t, p, key)
	if c := pick(t, p, key); c.Instance().ID != home || c.Spill != SpillAllBusy {
		t.Fatalf("went to %s (spill %q) with in flight %v; want %s, where the key was placed, as %q", c.Instance().ID, c.Spill, before, home, SpillAllBusy)
	} else {
		c.Done()
	}
	// One instance drops to overflowStay+1 below the least of the others,
	// still over the threshold: every key goes there.
	drop(quiet, threshold+4-overflowStay-1)
	before = inFlightByID(p)
	for i := range 5 {
		c := pick(t, p, textReq(fmt.Sprintf("new key %d", i)))
		if c.Instance().ID != quiet || c.Spill != SpillAllBusy {
			t.Fatalf("key %d went to %s (spill %q) with in flight %v; want %s, the least loaded, as %q", i, c.Instance().ID, c.Spill, before, quiet, SpillAllBusy)
		}
		c.Done()
	}
}

func inFlightByID(p *Policy) map[string]int64 {
	out := map[string]int64{}
	for _, in := range p.Instances() {
		out[in.ID] = p.InFlight(in.ID)
	}
	return out
}

func TestEjectionWalksOrderAndFailsOpen(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1, Now: func() time.Time { return now }})
	req := textReq("some prompt text that is long enough")
	c := pick(t, p, req)
	c.Done()
	first := c.Instance().ID
	p.Eject(first, now.Add(time.Second))
	c2 := pick(t, p, req)
	c2.Done()
	if c2.Instance().ID == first || c2.Spill != SpillUnhealthy {
		t.Fatalf("ejected %s still chosen (%s, %q)", first, c2.Instance().ID, c2.Spill)
	}
	for _, in := range p.Instances() {
		p.Eject(in.ID, now.Add(time.Second))
	}
	c3 := pick(t, p, req)
	c3.Done()
	now = now.Add(2 * time.Second)
	c4 := pick(t, p, req)
	c4.Done()
	if c4.Instance().ID != first {
		t.Fatalf("after back-off: %s, want %s again", c4.Instance().ID, first)
	}
}

func TestChoiceNextFollowsOrderAndBalancesInFlight(t *testing.T) {
	p := newPolicy(t, PrefixAware, 4, Tuning{})
	c := pick(t, p, textReq("retry me"))
	seen := map[string]bool{c.Instance().ID: true}
	for c.Next() {
		if seen[c.Instance().ID] {
			t.Fatalf("order revisits %s", c.Instance().ID)
		}
		seen[c.Instance().ID] = true
	}
	if len(seen) != 4 {
		t.Fatalf("order covers %d instances, want 4", len(seen))
	}
	c.Done()
	c.Done()
	for _, in := range p.Instances() {
		if got := p.InFlight(in.ID); got != 0 {
			t.Fatalf("%s left with %d in flight", in.ID, got)
		}
	}
}

// TestRemap checks the placement function: 7→8 moves about 1/8 of the keys,
// all of them to the new instance; 8→7 moves only the removed one's keys.
func TestRemap(t *testing.T) {
	const keys = 200000
	p7 := newPolicy(t, PrefixAware, 7, Tuning{ShareSlack: -1})
	p8 := newPolicy(t, PrefixAware, 8, Tuning{ShareSlack: -1})
	t7, t8 := p7.table.Load(), p8.table.Load()
	moved, between := 0, 0
	for k := range keys {
		key := hrw.Mix64(uint64(k) + 1)
		a := t7.Members[rank(t7, t7.All, key, nil)[0]].ID
		b := t8.Members[rank(t8, t8.All, key, nil)[0]].ID
		if a != b {
			moved++
			if b != "vllm-7" {
				between++
			}
		}
	}
	frac := float64(moved) / keys
	t.Logf("7→8: %.2f%% of keys moved, %d between survivors", 100*frac, between)
	if frac > 1.0/8+0.005 || between != 0 {
		t.Fatalf("moved %.3f (limit %.3f), %d between survivors", frac, 1.0/8+0.005, between)
	}
}

// TestRemapThroughPick runs the same through the full decision (fresh
// policies, so no learned state) with real prompts.
func TestRemapThroughPick(t *testing.T) {
	const keys = 20000
	p7 := newPolicy(t, PrefixAware, 7, Tuning{ShareSlack: -1})
	p8 := newPolicy(t, PrefixAware, 8, Tuning{ShareSlack: -1})
	r := rand.New(rand.NewPCG(7, 8))
	moved, between := 0, 0
	for range keys {
		req := textReq(randomText(r, 500))
		a, b := pick(t, p7, req), pick(t, p8, req)
		a.Done()
		b.Done()
		if a.Instance().ID != b.Instance().ID {
			moved++
			if b.Instance().ID != "vllm-7" {
				between++
			}
		}
	}
	frac := float64(moved) / keys
	t.Logf("7→8 through Pick: %.2f%% moved, %d between survivors", 100*frac, between)
	if frac > 1.0/8+0.01 || between != 0 {
		t.Fatalf("moved %.3f, %d between survivors", frac, between)
	}
}

func TestWeightedShares(t *testing.T) {
	p := New(Tuning{ShareSlack: -1})
	ins := instancesOf(3)
	ins[2].Weight = 2
	if err := p.Update(Config{Strategy: PrefixAware, HashSeed: 1, PrefixLength: 4096, ConcurrencyThreshold: 10, Instances: ins}); err != nil {
		t.Fatal(err)
	}
	tb := p.table.Load()
	counts := map[string]int{}
	for k := range 100000 {
		counts[tb.Members[rank(tb, tb.All, hrw.Mix64(uint64(k)), nil)[0]].ID]++
	}
	if got := float64(counts["vllm-2"]) / 100000; got < 0.48 || got > 0.52 {
		t.Fatalf("weight-2 instance got %.3f of keys, want 0.5", got)
	}
}

// TestHotIdenticalRequestsUseTheirWholeReplicaSet sends one identical
// request over and over: it is the hottest possible key, so the policy
// replicates it and must spread it over every replica, not two.
func TestHotIdenticalRequestsUseTheirWholeReplicaSet(t *testing.T) {
	p := newPolicy(t, PrefixAware, 7, Tuning{})
	req := textReq(strings.Repeat("the same request every time ", 100))
	counts := map[string]int{}
	for i := range 7000 {
		c := pick(t, p, req)
		c.Done()
		if i >= 1000 {
			counts[c.Instance().ID]++
		}
	}
	if len(counts) != 7 {
		t.Fatalf("a key with all the traffic used %d instances: %v", len(counts), counts)
	}
	if got := maxOverAvg(counts, 7); got > 1.10 {
		t.Fatalf("max/avg share %.3f: %v", got, counts)
	}
}

// A request whose instance is at the threshold spills only to an instance
// with spillRoom requests of room: one with a single request of room is
// full again at once, and the cold prefill is certain. With none that
// roomy, the request is all-busy overflow and stays home, as long as home
// is within overflowStay of the least loaded. Under a threshold of 8, one request of room is enough.
func TestSpillsOnlyWhereThereIsRoom(t *testing.T) {
	for _, tc := range []struct {
		name      string
		threshold int64 // 0: 10
		others    int64 // requests on every instance but home
		wantSpill string
		wantHome  bool
	}{
		{name: "alone, one of room", others: 9, wantSpill: SpillAllBusy, wantHome: true},
		{name: "alone, two of room", others: 8, wantSpill: SpillConcurrency},
		{name: "alone, home too far above", others: 10 - overflowStay - 1, wantSpill: SpillConcurrency},
		{name: "threshold 4, one of room", threshold: 4, others: 3, wantSpill: SpillConcurrency},
	} {
		p := newPolicy(t, PrefixAware, 3, Tuning{ShareSlack: -1})
		threshold := cmp.Or(tc.threshold, 10)
		cfg := p.table.Load().Cfg
		cfg.ConcurrencyThreshold = int(threshold)
		if err := p.Update(cfg); err != nil {
			t.Fatal(err)
		}
		req := textReq("a prompt whose instance is at the threshold")
		home := placedOn(t, p, req)
		for _, m := range p.table.Load().Members {
			n := tc.others
			if m.ID == home {
				n = threshold
			}
			m.Stat.InFlight.Store(n)
		}
		c := pick(t, p, req)
		if c.Spill != tc.wantSpill || (c.Instance().ID == home) != tc.wantHome {
			t.Fatalf("%s: went to %s with spill %q (home %s); want spill %q, home %v", tc.name, c.Instance().ID, c.Spill, home, tc.wantSpill, tc.wantHome)
		}
		c.Done()
	}
}

// TestAllBusyOverflowLeavesALongPrefill: with every instance over the
// threshold and as many requests in flight on each, a request stays where
// its key was placed, unless that instance is prefilling a long prompt: a
// short request would wait behind the whole prefill there, and goes to an
// instance with as few requests and nothing to prefill.
func TestAllBusyOverflowLeavesALongPrefill(t *testing.T) {
	const threshold = 10 // newPolicy's ConcurrencyThreshold
	p := newPolicy(t, PrefixAware, 3, Tuning{ShareSlack: -1})
	req := textReq("a short chat whose key is placed on a busy instance")
	home := placedOn(t, p, req)
	for _, m := range p.table.Load().Members {
		m.Stat.InFlight.Store(threshold + 1)
	}
	checkAllBusyStays(t, p, req, home, []allBusyCase{
		{name: "decoding only", prefill: 0, stays: true},
		{name: "prefilling 60k tokens", prefill: 60000, stays: false},
		{name: "prefilling a little", prefill: 2000, stays: true},
	})
}

// allBusyCase is a prefill left on a request's home instance and whether
// an all-busy request stays there.
type allBusyCase struct {
	name    string
	prefill int64 // tokens left to prefill on the home instance
	stays   bool
}

// checkAllBusyStays picks req once per case, with the home instance's
// prefill set to the case's, and checks that it overflows (every instance
// is busy) and stays home or leaves as the case says.
func checkAllBusyStays(t *testing.T, p *Policy, req Request, home string, cases []allBusyCase) {
	t.Helper()
	homeStat := p.stats.Get(home)
	for _, tc := range cases {
		homeStat.Prefill.Store(tc.prefill)
		c := pick(t, p, req)
		if c.Spill != SpillAllBusy {
			t.Fatalf("%s: spill %q, want %q", tc.name, c.Spill, SpillAllBusy)
		}
		if stayed := c.Instance().ID == home; stayed != tc.stays {
			t.Fatalf("%s: went to %s (placed on %s); stayed %v, want %v", tc.name, c.Instance().ID, home, stayed, tc.stays)
		}
		c.Done()
	}
}

// TestAllBusyOverflowKeepsALongPromptWhereItIsCached: when every instance
// is busy, a request for a long document stays on the instance that holds
// it though that instance has more requests in flight than overflowStay
// over the least loaded, because elsewhere it would first have to prefill
// the whole document; it leaves when the home is itself far behind in
// tokens.
func TestAllBusyOverflowKeepsALongPromptWhereItIsCached(t *testing.T) {
	const threshold = 10 // newPolicy's ConcurrencyThreshold
	p := newPolicy(t, PrefixAware, 3, Tuning{ShareSlack: -1})
	doc := randomText(rand.New(rand.NewPCG(7, 7)), 4096)
	req := Request{Text: []byte(doc), WindowBytes: len(doc), PromptBytes: 160_000} // about 40k tokens
	first := pick(t, p, req)
	home := first.Instance().ID
	first.Prefilled()
	first.Done()
	for _, m := range p.table.Load().Members {
		m.Stat.InFlight.Store(threshold + 1)
	}
	p.stats.Get(home).InFlight.Store(threshold + 1 + overflowStay + 2)
	checkAllBusyStays(t, p, req, home, []allBusyCase{
		{name: "decoding only", prefill: 0, stays: true},
		{name: "prefilling 100k tokens", prefill: 100_000, stays: false},
	})
}

// learntState is everything a decision could change: each instance's
// counts, the popularity sketch and the prefix index.
func learntState(p *Policy) string {
	var b strings.Builder
	for _, in := range p.Instances() {
		s := p.stats.Get(in.ID)
		fmt.Fprintf(&b, "%s %d %d %d %d|", in.ID, s.InFlight.Load(), s.Prefill.Load(), s.Share.Load(), s.Joined.Load())
	}
	pop := p.pop.State()
	fmt.Fprintf(&b, "pop %d %d %v|", pop.Total, pop.Since, pop.Counts)
	entries := map[uint64]prefixindex.Entry{}
	p.index.Each(func(h uint64, e prefixindex.Entry) { entries[h] = e })
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		fmt.Fprintf(&b, "%x:%v;", k, entries[k])
	}
	return b.String()
}

// TestDecideChangesNothing: on a policy that has learnt traffic and has
// requests in flight (so the guard spills), deciding alone changes none of
// the policy's state; recording the same decision (Pick) does.
func TestDecideChangesNothing(t *testing.T) {
	p := newPolicy(t, PrefixAware, 6, Tuning{SketchWidth: 1 << 10, IndexEntries: 1 << 12})
	r := rand.New(rand.NewPCG(5, 5))
	system := randomText(r, 5000)
	var open []*Choice
	for i := range 400 {
		c := pick(t, p, textReq(system[:r.IntN(5000)]+randomText(r, 200)))
		if i%3 == 0 {
			open = append(open, c)
		} else {
			c.Done()
		}
	}
	for i := range 200 {
		req := textReq(system[:r.IntN(5000)] + randomText(r, 200))
		before := learntState(p)
		placedOn(t, p, req)
		if after := learntState(p); after != before {
			t.Fatalf("decision %d changed the policy's state", i)
		}
		pick(t, p, req).Done()
		if learntState(p) == before {
			t.Fatalf("recording decision %d changed nothing", i)
		}
	}
	for _, c := range open {
		c.Done()
	}
}
