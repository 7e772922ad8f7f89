package policy

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

func TestRegistryMatchesRoutingDocument(t *testing.T) {
	if got := Strategies(false); !slices.Equal(got, routing.Strategies) {
		t.Fatalf("production strategies %v, routing document's %v", got, routing.Strategies)
	}
	if got := Strategies(true); !slices.Contains(got, Baseline) {
		t.Fatalf("benchmark strategies %v lack %s", got, Baseline)
	}
	err := New(Tuning{}).Update(Config{Strategy: Baseline, Instances: fleet(2)})
	if err == nil || !strings.Contains(err.Error(), "RANDOM, LEAST_OUTSTANDING_REQUESTS, PREFIX_AWARE") {
		t.Fatalf("baseline without BenchmarkStrategies: %v", err)
	}
	if err := ValidStrategy("FASTEST", true); err == nil || !strings.Contains(err.Error(), string(Baseline)) {
		t.Fatalf("unknown strategy: %v", err)
	}
}

func TestPlacementLogTruncates(t *testing.T) {
	l := newPlacementLog(4)
	for i := range 6 {
		l.add([]uint64{uint64(i)}, []int{0}, 1, 1)
	}
	ids := map[uint32]string{1: "a"}
	r := l.since(1, ids)
	if r.Seq != 6 || len(r.Placements) != 4 || !r.Truncated || r.Placements[0].Hash != 2 {
		t.Fatalf("since 1: seq %d %v truncated %v", r.Seq, r.Placements, r.Truncated)
	}
	if r = l.since(4, ids); len(r.Placements) != 2 || r.Truncated || r.Placements[1].Hash != 5 {
		t.Fatalf("since 4: seq %d %v truncated %v", r.Seq, r.Placements, r.Truncated)
	}
	if r = l.since(6, ids); len(r.Placements) != 0 {
		t.Fatalf("since 6: %v", r.Placements)
	}
	// A placement on an instance the registry forgot is left out.
	if r = l.since(4, map[uint32]string{2: "b"}); len(r.Placements) != 0 || r.Seq != 6 {
		t.Fatalf("forgotten instance: seq %d %v", r.Seq, r.Placements)
	}
}

// TestPeerLoadsAddUpAndForget checks that a peer's report counts, is
// replaced rather than added on re-apply, and is dropped by ForgetPeer.
func TestPeerLoadsAddUpAndForget(t *testing.T) {
	p := newPolicy(t, LeastOutstandingRequests, 2, Tuning{})
	r := Report{Replica: "b", Loads: []InstanceLoad{{ID: "vllm-0", Requests: 5}}}
	p.ApplyPeer(r)
	p.ApplyPeer(r)
	for range 4 { // vllm-0 has 5 in flight elsewhere: vllm-1 gets these
		if c := pick(t, p, textReq("x")); c.Instance().ID != "vllm-1" {
			t.Fatalf("went to %s despite the peer's 5 in flight there", c.Instance().ID)
		}
	}
	p.ForgetPeer("b")
	if c := pick(t, p, textReq("x")); c.Instance().ID != "vllm-0" {
		t.Fatalf("after ForgetPeer went to %s, want the now idle vllm-0", c.Instance().ID)
	}
}

// TestThresholdHoldsAcrossReplicas sends a hot key through three replicas
// whose reports never reach each other in time (the worst case): each keeps
// to its slice, so the instance never holds more than threshold + replicas.
func TestThresholdHoldsAcrossReplicas(t *testing.T) {
	const replicas, threshold = 3, 10
	var ps []*Policy
	for range replicas {
		p := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1, ReplicaLoad: 1e9})
		p.SetReplicas(replicas)
		ps = append(ps, p)
	}
	req := textReq(strings.Repeat("hot prefix ", 300))
	on := map[string]int{}
	// 36 requests: fewer than the fleet's 4 × 10, so none needs to go
	// over a threshold.
	for i := range 36 {
		c := pick(t, ps[i%replicas], req)
		on[c.Instance().ID]++
	}
	for id, n := range on {
		if n > threshold+replicas {
			t.Fatalf("%s holds %d requests, more than threshold %d + %d replicas", id, n, threshold, replicas)
		}
	}
	// With reports exchanged the global count binds at the threshold.
	for i, p := range ps {
		for j, q := range ps {
			if i != j {
				r := q.LocalReport("p", 0)
				r.Replica = fmt.Sprint(j)
				p.ApplyPeer(r)
			}
		}
	}
	first := pick(t, ps[0], req)
	if first.Spill == SpillNone {
		t.Fatalf("no spill with the instance over the global threshold")
	}
}

// TestThresholdHoldsWhileAReportIsOnItsWay: a peer has pulled this
// replica's report but not yet applied it, so it still grants itself its
// part of the headroom the older report left. This replica must count its
// sends from the older report until the peer acknowledges the newer one,
// or the two together take the instance past T + R − 1 (to T + 3 here).
func TestThresholdHoldsWhileAReportIsOnItsWay(t *testing.T) {
	const threshold = 10
	a := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1, ReplicaLoad: 1e9})
	b := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1, ReplicaLoad: 1e9})
	exchange := func(from, to *Policy, fromName, toName string, ack bool) Report {
		r := from.LocalReport(toName, 0)
		r.Replica = fromName
		if ack {
			to.ApplyPeer(r)
			from.PeerApplied(toName, r.Seq)
		}
		return r
	}
	for _, p := range []*Policy{a, b} {
		p.SetReplicas(2)
	}
	exchange(a, b, "a", "b", true)
	exchange(b, a, "b", "a", true)
	req := textReq(strings.Repeat("hot prefix ", 300))
	home := pick(t, a, req).Instance().ID
	on := func() int64 { return a.InFlight(home) + b.InFlight(home) }
	for a.InFlight(home) < threshold/2 {
		if c := pick(t, a, req); c.Instance().ID != home {
			break
		}
	}
	// b pulls a's report; it is on its way, not applied.
	inTransit := exchange(a, b, "a", "b", false)
	for range threshold {
		pick(t, a, req)
		pick(t, b, req)
	}
	if got, bound := on(), int64(threshold+2-1); got > bound {
		t.Fatalf("%s holds %d requests with a report on its way, over T + R − 1 = %d", home, got, bound)
	}
	// Once b has applied and acknowledged it, a counts from it and b
	// keeps to what is left: the bound still holds, and the instance fills.
	b.ApplyPeer(inTransit)
	a.PeerApplied("b", inTransit.Seq)
	exchange(b, a, "b", "a", true)
	for range threshold {
		pick(t, a, req)
		pick(t, b, req)
	}
	if got, bound := on(), int64(threshold+2-1); got > bound || got < threshold {
		t.Fatalf("%s holds %d requests after the report arrived, want %d to %d", home, got, threshold, bound)
	}
}

// TestTokenGuardSpillsOffALongPrefill: an instance prefilling one huge
// prompt is overloaded for a short cold request, though it has a single
// request in flight, while ten short decoding requests are not.
func TestTokenGuardSpillsOffALongPrefill(t *testing.T) {
	p := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1})
	short := textReq(strings.Repeat("short chat ", 50))
	home := pick(t, p, short)
	home.Done()
	// Ten short requests on the home instance, decoding: no spill.
	var held []*Choice
	for range 9 {
		c := pick(t, p, short)
		c.Prefilled()
		held = append(held, c)
	}
	if c := pick(t, p, short); c.Spill != SpillNone {
		t.Fatalf("ten decoding requests made a token spill (%s)", c.Spill)
	} else {
		c.Done()
	}
	for _, c := range held {
		c.Done()
	}
	// One 60k-token prompt prefilling on the same instance: spill.
	// Its beginning is the key's, the rest a document new to the fleet.
	long := string(short.Text) + randomText(rand.New(rand.NewPCG(1, 1)), 8000)
	huge := pick(t, p, Request{Text: []byte(long), WindowBytes: 4096, PromptBytes: 240000})
	if huge.Instance().ID != home.Instance().ID {
		t.Fatalf("the long prompt went to %s, not the key's home %s", huge.Instance().ID, home.Instance().ID)
	}
	c := pick(t, p, short)
	if c.Spill != SpillTokens || c.Instance().ID == home.Instance().ID {
		t.Fatalf("behind a 60k-token prefill: %s (%q), want a token spill", c.Instance().ID, c.Spill)
	}
	c.Done()
	huge.Prefilled()
	if c := pick(t, p, short); c.Spill != SpillNone || c.Instance().ID != home.Instance().ID {
		t.Fatalf("after the prefill: %s (%q), want home again", c.Instance().ID, c.Spill)
	}
}

// TestColdLongSpillIsRemembered: a long prompt spilled off an instance that
// holds none of it leaves the prompt only where it went, so its key's next
// request goes there once the overload is over; a short one, cheap to
// prefill again, returns to its first choice, as a warm key returns home
// (TestOverloadGuardSpillsAlongOwnOrder).
func TestColdLongSpillIsRemembered(t *testing.T) {
	for _, tc := range []struct {
		name        string
		promptBytes int
		remembered  bool
	}{
		{"long prompt (20k tokens)", 80_000, true},
		{"short prompt", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1, ReplicaLoad: 1e9})
			hot := textReq(strings.Repeat("hot prefix ", 300))
			var held []*Choice
			for range 10 { // one instance at the threshold, decoding
				c := pick(t, p, hot)
				c.Prefilled()
				held = append(held, c)
			}
			full := held[0].Instance().ID
			// The others deep in prefills, so that the new key's prefill
			// would still finish first on the full one (coldPlacement keeps
			// it there) and only the threshold moves it.
			for _, in := range p.Instances() {
				if in.ID != full {
					p.stats.get(in.ID).prefill.Store(50_000)
				}
			}
			var key Request
			for i := 0; ; i++ {
				if i == 1000 {
					t.Fatalf("no new key placed on %s in 1000 tries", full)
				}
				text := fmt.Sprintf("new key %d: %s", i, strings.Repeat("cold ", 200))
				key = Request{Text: []byte(text), WindowBytes: len(text), PromptBytes: tc.promptBytes}
				if d, err := p.Peek(key); err == nil && d.Placed == full {
					break
				}
			}
			c := pick(t, p, key)
			if c.Spill != SpillConcurrency || c.Instance().ID == full {
				t.Fatalf("new key went to %s (spill %q); want a concurrency spill off %s", c.Instance().ID, c.Spill, full)
			}
			went := c.Instance().ID
			c.Prefilled()
			c.Done()
			for _, h := range held {
				h.Done()
			}
			for _, in := range p.Instances() {
				p.stats.get(in.ID).prefill.Store(0)
			}
			want := full
			if tc.remembered {
				want = went
			}
			if c := pick(t, p, key); c.Instance().ID != want || c.Spill != SpillNone {
				t.Fatalf("next request of the key went to %s (spill %q); want %s (spilled to %s)", c.Instance().ID, c.Spill, want, went)
			}
		})
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	a := newPolicy(t, PrefixAware, 7, Tuning{SketchWidth: 1 << 10, IndexEntries: 1 << 12})
	r := rand.New(rand.NewPCG(13, 14))
	var reqs []Request
	for range 500 {
		req := textReq(randomText(r, 800))
		reqs = append(reqs, req)
		pick(t, a, req).Done()
	}
	snap := a.Snapshot()
	b := newPolicy(t, PrefixAware, 7, Tuning{SketchWidth: 1 << 10, IndexEntries: 1 << 12})
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	x, err := decodeSnapshot(snap, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	y, err := decodeSnapshot(b.Snapshot(), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x.counts, y.counts) || x.total != y.total || !maps.Equal(sharesOf(x), sharesOf(y)) {
		t.Fatal("shares or sketch differ after a round trip")
	}
	if x.popSince == 0 || x.popSince != y.popSince || x.shareSince != y.shareSince {
		t.Fatalf("decay phases: sketch %d → %d, shares %d → %d", x.popSince, y.popSince, x.shareSince, y.shareSince)
	}
	if a.IndexEntries() != b.IndexEntries() {
		t.Fatalf("index %d entries, restored %d", a.IndexEntries(), b.IndexEntries())
	}
	for i, req := range reqs {
		x, _ := a.Peek(req)
		y, _ := b.Peek(req)
		if x != y {
			t.Fatalf("request %d: %+v before, %+v restored", i, x, y)
		}
	}
	wrong := New(Tuning{SketchWidth: 1 << 11})
	if err := wrong.Restore(snap); err == nil {
		t.Fatal("restored a snapshot of another sketch width")
	}
	// A peer not yet upgraded sends version 2, without the decay phases.
	phases := binary.AppendUvarint(binary.AppendUvarint(nil, x.popSince), x.shareSince)
	v2 := append([]byte("WRPS\x02"), snap[5:len(snap)-len(phases)]...)
	if err := b.Restore(v2); err != nil {
		t.Fatalf("version 2: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("WRPS"), append([]byte("WRPS\x04"), snap[5:]...), snap[:len(snap)-1], append(slices.Clone(snap), 0)} {
		if err := b.Restore(bad); err == nil {
			t.Fatalf("restored garbage of %d bytes", len(bad))
		}
	}
}

func sharesOf(s *decodedSnapshot) map[string]uint64 {
	out := map[string]uint64{}
	for i, id := range s.ids {
		out[id] = s.shares[i]
	}
	return out
}

func FuzzRestore(f *testing.F) {
	p := newPolicy(f, PrefixAware, 3, Tuning{SketchWidth: 16, IndexEntries: 64})
	for i := range 20 {
		pick(f, p, textReq(fmt.Sprintf("prompt %d", i))).Done()
	}
	f.Add(p.Snapshot())
	f.Add([]byte("WRPS\x01\x01\x01a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		q := New(Tuning{SketchWidth: 16, IndexEntries: 64})
		if err := q.Restore(data); err != nil {
			return
		}
		// Whatever was accepted round-trips into an accepted snapshot.
		if err := New(Tuning{SketchWidth: 16, IndexEntries: 64}).Restore(q.Snapshot()); err != nil {
			t.Fatalf("re-snapshot refused: %v", err)
		}
	})
}

// TestPeersSharePopularity checks that a replica learns popularity from
// the requests its peers decided: after pulling a peer's report, it counts
// every block of the peer's requests as the peer does, past their anchors
// too (the peer counts those, and walks deeper on them).
func TestPeersSharePopularity(t *testing.T) {
	a := newPolicy(t, PrefixAware, 4, Tuning{})
	b := newPolicy(t, PrefixAware, 4, Tuning{})
	shared := strings.Repeat("system prompt shared by every request. ", 40)
	pick(t, a, Request{Model: "m", Text: []byte("an earlier request"), WindowBytes: 18}).Done()
	first := a.LocalReport("p", 0)
	if first.Seq == 0 || len(first.Seen) != 0 || first.SeenRequests != 0 {
		t.Fatalf("a first pull (seq %d) carries seen hashes: %v", first.Seq, first.Seen)
	}
	var hashes [][]uint64
	for i := range 20 {
		req := Request{Model: "m", Text: []byte(shared + strings.Repeat(fmt.Sprintf("question %d asked at length. ", i), 20))}
		req.WindowBytes = len(req.Text)
		c := pick(t, a, req)
		c.Done()
		tb := a.table.Load()
		hashes = append(hashes, blockChain(nil, scopeSeed(tb.cfg.HashSeed, req.Model, req.Tenant), req.Text, tb.blockSize))
	}
	r := a.LocalReport("p", first.Seq)
	if r.SeenRequests != 20 || len(r.Seen) == 0 {
		t.Fatalf("report: %d requests, %d hashes", r.SeenRequests, len(r.Seen))
	}
	r.Replica = "a"
	b.ApplyPeer(r)
	if got, want := b.pop.total.Load(), a.pop.total.Load()-1; got != want {
		t.Fatalf("b counts %d requests, a %d", got, want)
	}
	// The shared leading block was carried by all 20 requests.
	if got := b.pop.estimate(hashes[0][0]); got != 20 {
		t.Fatalf("b estimates the shared first block at %d, want 20", got)
	}
	// Every block, to the end of each request's chain, as a counts it:
	// counting deeper blocks only where they were decided made the
	// replica that owns a document's instance (and decides its requests)
	// walk past the window on it while its peers anchored inside, and the
	// two placed the same request on different instances (rag, 3 replicas:
	// 363 of 375 agreed).
	for i, chain := range hashes {
		for d, h := range chain {
			if got, want := b.pop.estimate(h), a.pop.estimate(h); got != want {
				t.Fatalf("request %d, block %d of %d: b estimates %d, a %d", i, d, len(chain), got, want)
			}
		}
	}
	// Applying the same range again would double count: the puller asks
	// from the Seq it last applied, so it never does; a later report holds
	// only what came after.
	if r2 := a.LocalReport("p", r.Seq); len(r2.Seen) != 0 || r2.SeenRequests != 0 {
		t.Fatalf("nothing new, yet %d hashes", len(r2.Seen))
	}
}

// TestPrefillTokensAreOwnWork: the exported prefill figure is this
// replica's alone (routers' sums must not count a request once per
// replica that heard of it), charged at Pick and released at Prefilled.
func TestPrefillTokensAreOwnWork(t *testing.T) {
	p := newPolicy(t, Random, 1, Tuning{})
	p.ApplyPeer(Report{Replica: "b", Loads: []InstanceLoad{{ID: "vllm-0", Requests: 3, PrefillTokens: 5000}}})
	c := pick(t, p, textReq(strings.Repeat("a", 400)))
	if got := p.PrefillTokens("vllm-0"); got != 100 {
		t.Fatalf("prefill tokens %d, want this replica's 400 bytes / 4 = 100 (the peer's 5000 left out)", got)
	}
	c.Prefilled()
	if got := p.PrefillTokens("vllm-0"); got != 0 {
		t.Fatalf("prefill tokens %d after the first token, want 0", got)
	}
	c.Done()
}

// TestPeekTellsPlacementFromSpill checks that Peek reports where the key is
// placed apart from where the overload guard sends it, so that agreement
// between replicas can be split into placement and spills.
func TestPeekTellsPlacementFromSpill(t *testing.T) {
	p := newPolicy(t, PrefixAware, 3, Tuning{ShareSlack: -1}) // no share balancing: one key, one home
	req := textReq(strings.Repeat("one conversation, one key. ", 40))
	home := pick(t, p, req)
	d, err := p.Peek(req)
	if err != nil || d.Spill != SpillNone || d.Placed != d.Instance || d.Instance != home.Instance().ID {
		t.Fatalf("below the threshold: %+v, %v (home %s)", d, err, home.Instance().ID)
	}
	for range 9 { // the home instance reaches the threshold of 10
		if c := pick(t, p, req); c.Instance().ID != home.Instance().ID {
			t.Fatalf("went to %s before the threshold", c.Instance().ID)
		}
	}
	if d, err = p.Peek(req); err != nil || d.Spill != SpillConcurrency || d.Placed != home.Instance().ID || d.Instance == d.Placed {
		t.Fatalf("at the threshold: %+v, %v (home %s)", d, err, home.Instance().ID)
	}
}

// TestKnownRequestsFollowEveryPuller: what every peer is sure to know of
// this replica is the least that any of them holds, and a peer that
// stopped pulling counts until PullerGone has passed.
func TestKnownRequestsFollowEveryPuller(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPolicy(t, PrefixAware, 2, Tuning{PullerGone: time.Second, Now: func() time.Time { return now }})
	s := p.stats.get("vllm-0")
	pull := func(peer string) {
		r := p.LocalReport(peer, 0)
		p.PeerApplied(peer, r.Seq)
	}
	s.inFlight.Store(4)
	pull("b")
	if k := s.knownRequests.Load(); k != 4 {
		t.Fatalf("known %d after b applied a report of 4, want 4", k)
	}
	s.inFlight.Store(8)
	pull("c")
	if k := s.knownRequests.Load(); k != 4 {
		t.Fatalf("known %d with b holding 4 and c 8, want 4", k)
	}
	r := p.LocalReport("c", 0) // on its way to c, not applied
	if k := s.knownRequests.Load(); k != 4 {
		t.Fatalf("known %d with a report on its way, want 4", k)
	}
	p.PeerApplied("c", r.Seq)
	now = now.Add(1500 * time.Millisecond) // b has not pulled since
	pull("c")
	if k := s.knownRequests.Load(); k != 8 {
		t.Fatalf("known %d after b went quiet for longer than PullerGone, want c's 8", k)
	}
	if got := p.LocalReport("", 0); got.Seq != r.Seq || s.knownRequests.Load() != 8 {
		t.Fatalf("a pull by no peer changed what peers know: %d", s.knownRequests.Load())
	}
}

// TestLongPrefillsSignalWithPeersOnly: a request the replica expects to
// prefill at least TokenFloor tokens of signals LongPrefills, so that the
// transport can poke the peers; a short one does not, nor a long one while
// no peer's report counts (there is nobody to tell). Signals are coalesced.
func TestLongPrefillsSignalWithPeersOnly(t *testing.T) {
	p := newPolicy(t, PrefixAware, 3, Tuning{})
	// Each long request is a new document, cold everywhere: a repeated
	// one would be expected to hit the instance it was sent to.
	docs := 0
	long := func() Request {
		docs++
		doc := randomText(rand.New(rand.NewPCG(uint64(docs), 1)), 4096)
		return Request{Text: []byte(doc), WindowBytes: len(doc), PromptBytes: 4 * 20_000}
	}
	short := textReq("a short chat")
	signalled := func() bool {
		select {
		case <-p.LongPrefills():
			return true
		default:
			return false
		}
	}
	pick(t, p, long()).Done()
	if signalled() {
		t.Fatal("signalled without peers")
	}
	p.ApplyPeer(Report{Replica: "peer", Epoch: 1, Loads: []InstanceLoad{{ID: "vllm-0", Requests: 1}}})
	pick(t, p, short).Done()
	if signalled() {
		t.Fatal("signalled for a short prompt")
	}
	pick(t, p, long()).Done()
	pick(t, p, long()).Done()
	if !signalled() {
		t.Fatal("no signal for a long prefill with a peer")
	}
	if signalled() {
		t.Fatal("two signals pending: they are coalesced")
	}
}

// TestTokenGuardChargesTheCacheASpillLoses: a token spill of a prompt its
// home instance holds is charged the prefill it would lose twice (see
// spillCost), so it leaves only a home much further behind than a prompt
// cold everywhere does.
func TestTokenGuardChargesTheCacheASpillLoses(t *testing.T) {
	p := newPolicy(t, PrefixAware, 4, Tuning{ShareSlack: -1})
	doc := func(seed uint64) Request {
		text := randomText(rand.New(rand.NewPCG(seed, seed)), 4096)
		return Request{Text: []byte(text), WindowBytes: len(text), PromptBytes: 40_000} // 10k tokens
	}
	warm := doc(1)
	first := pick(t, p, warm)
	home := first.Instance().ID
	first.Prefilled()
	first.Done()
	cold := doc(2)
	for seed := uint64(3); ; seed++ {
		if d, err := p.Peek(cold); err == nil && d.Placed == home {
			break
		}
		cold = doc(seed)
	}
	homeStat := p.stats.get(home)
	for _, tc := range []struct {
		name    string
		req     Request
		prefill int64  // tokens left to prefill on the home instance
		want    string // SpillTokens: spilled off home; SpillNone: kept at home; "placed": placed elsewhere
	}{
		// Charged once, 30k tokens ahead against a 10k-token cold prefill
		// elsewhere was a spill; charged twice it is not.
		{"cached at home, 30k tokens ahead", warm, 30_000, SpillNone},
		{"cached at home, 50k tokens ahead", warm, 50_000, SpillTokens},
		// A new key is placed where its prefill finishes first (see
		// coldPlacement) before the guard is asked.
		{"cold everywhere, 30k tokens ahead", cold, 30_000, "placed"},
	} {
		homeStat.prefill.Store(tc.prefill)
		c := pick(t, p, tc.req)
		got := c.Spill
		if c.Instance().ID != home && c.Spill == SpillNone {
			got = "placed"
		}
		if got != tc.want || (got == SpillNone) != (c.Instance().ID == home) {
			t.Errorf("%s: went to %s (spill %q), home %s; want %q", tc.name, c.Instance().ID, c.Spill, home, tc.want)
		}
		c.Done()
	}
}

// TestColdPlacementGoesWhereThePrefillFinishesFirst: a new key with a long
// prompt is placed on the instance with the least work ahead, not on its
// HRW choice behind a queue, and its next request follows it there; a new
// short key and a known key keep their instance.
func TestColdPlacementGoesWhereThePrefillFinishesFirst(t *testing.T) {
	p := newPolicy(t, PrefixAware, 4, Tuning{})
	doc := func(seed uint64, promptBytes int) Request {
		text := randomText(rand.New(rand.NewPCG(seed, seed)), 4096)
		return Request{Text: []byte(text), WindowBytes: len(text), PromptBytes: promptBytes}
	}
	long := doc(1, 80_000) // 20k tokens
	d, err := p.Peek(long)
	if err != nil {
		t.Fatal(err)
	}
	// Every instance 16k tokens behind but one at 9k: not twice lighter,
	// so neither the two choices (muchLighter) nor the guard would move
	// the key, but its prefill finishes first there.
	light := ""
	for _, in := range fleet(4) {
		if in.ID != d.Placed && light == "" {
			light = in.ID
			p.stats.get(in.ID).prefill.Store(9_000)
		} else {
			p.stats.get(in.ID).prefill.Store(16_000)
		}
	}
	c := pick(t, p, long)
	if c.Instance().ID != light || c.Spill != SpillNone || !c.ColdPlaced {
		t.Fatalf("a new 20k-token prompt went to %s (spill %q, cold placement %v), not to %s with the least work ahead", c.Instance().ID, c.Spill, c.ColdPlaced, light)
	}
	home := c.Instance().ID
	c.Prefilled()
	c.Done()
	for _, in := range fleet(4) {
		p.stats.get(in.ID).prefill.Store(0)
	}
	if again := pick(t, p, long); again.Instance().ID != home {
		t.Fatalf("the key's next request went to %s, not %s where it was prefilled", again.Instance().ID, home)
	} else {
		again.Done()
	}
	// Moderate load at the key's home keeps it there: the cache is worth
	// more than the wait (the token guard decides when it is not).
	p.stats.get(home).prefill.Store(12_000)
	if c := pick(t, p, long); c.Instance().ID != home {
		t.Fatalf("a known key left its home %s for %s (spill %q) over 12k tokens", home, c.Instance().ID, c.Spill)
	} else {
		c.Done()
	}
	p.stats.get(home).prefill.Store(0)

	short := doc(2, 8_000) // 2k tokens: under TokenFloor
	d, err = p.Peek(short)
	if err != nil {
		t.Fatal(err)
	}
	p.stats.get(d.Placed).prefill.Store(6_000)
	if c := pick(t, p, short); c.Instance().ID != d.Placed || c.ColdPlaced {
		t.Fatalf("a new short prompt went to %s (cold placement %v), not its first choice %s", c.Instance().ID, c.ColdPlaced, d.Placed)
	} else {
		c.Done()
	}
}
