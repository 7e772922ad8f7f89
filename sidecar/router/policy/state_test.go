package policy

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

func TestRegistryMatchesRoutingDocument(t *testing.T) {
	if got := slices.Sorted(maps.Keys(strategies)); !slices.Equal(got, slices.Sorted(slices.Values(routing.Strategies))) {
		t.Fatalf("production strategies %v, routing document's %v", got, routing.Strategies)
	}
	if got := Strategies(true); !slices.Contains(got, referenceStrategy) {
		t.Fatalf("benchmark strategies %v lack %s", got, referenceStrategy)
	}
	err := New(Tuning{}).Update(Config{Strategy: referenceStrategy, Instances: instancesOf(2)})
	if err == nil || !strings.Contains(err.Error(), "RANDOM, LEAST_OUTSTANDING_REQUESTS, PREFIX_AWARE") {
		t.Fatalf("benchmark strategy without BenchmarkStrategies: %v", err)
	}
	if err := ValidStrategy("FASTEST", true); err == nil || !strings.Contains(err.Error(), string(referenceStrategy)) {
		t.Fatalf("unknown strategy: %v", err)
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
					p.stats.Get(in.ID).Prefill.Store(50_000)
				}
			}
			var key Request
			for i := 0; ; i++ {
				if i == 1000 {
					t.Fatalf("no new key placed on %s in 1000 tries", full)
				}
				text := fmt.Sprintf("new key %d: %s", i, strings.Repeat("cold ", 200))
				key = Request{Text: []byte(text), WindowBytes: len(text), PromptBytes: tc.promptBytes}
				if placedOn(t, p, key) == full {
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
				p.stats.Get(in.ID).Prefill.Store(0)
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
	x, err := decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	y, err := decodeSnapshot(b.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x.Sketch.Counts, y.Sketch.Counts) || x.Sketch.Total != y.Sketch.Total || !maps.Equal(sharesOf(x), sharesOf(y)) {
		t.Fatal("shares or sketch differ after a round trip")
	}
	if x.Sketch.Since == 0 || x.Sketch.Since != y.Sketch.Since || x.ShareSince != y.ShareSince {
		t.Fatalf("decay phases: sketch %d → %d, shares %d → %d", x.Sketch.Since, y.Sketch.Since, x.ShareSince, y.ShareSince)
	}
	if a.IndexEntries() != b.IndexEntries() {
		t.Fatalf("index %d entries, restored %d", a.IndexEntries(), b.IndexEntries())
	}
	for i, req := range reqs {
		x, y := placedOn(t, a, req), placedOn(t, b, req)
		if x != y {
			t.Fatalf("request %d: %+v before, %+v restored", i, x, y)
		}
	}
	wrong := New(Tuning{SketchWidth: 1 << 11})
	if err := wrong.Restore(snap); err == nil {
		t.Fatal("restored a snapshot of another sketch width")
	}
	other := *x
	other.Format++
	var otherFormat bytes.Buffer
	if err := gob.NewEncoder(&otherFormat).Encode(&other); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, []byte("WRPS\x03"), otherFormat.Bytes(), snap[:len(snap)-1], snap[1:], append(slices.Clone(snap), 0)} {
		if err := b.Restore(bad); err == nil {
			t.Fatalf("restored garbage of %d bytes", len(bad))
		}
	}
}

func sharesOf(s *snapshot) map[string]int64 {
	out := map[string]int64{}
	for i, id := range s.IDs {
		out[id] = s.Shares[i]
	}
	return out
}

func FuzzRestore(f *testing.F) {
	p := newPolicy(f, PrefixAware, 3, Tuning{SketchWidth: 16, IndexEntries: 64})
	for i := range 20 {
		pick(f, p, textReq(fmt.Sprintf("prompt %d", i))).Done()
	}
	f.Add(p.Snapshot())
	f.Add([]byte("WRPS\x03\x01\x01a"))
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

// TestTokenGuardChargesTheCacheASpillLoses: a token spill of a prompt its
// home instance holds is charged the prefill it would lose twice (see
// lost), so it leaves only a home much further behind than a prompt
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
		if placedOn(t, p, cold) == home {
			break
		}
		cold = doc(seed)
	}
	homeStat := p.stats.Get(home)
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
		homeStat.Prefill.Store(tc.prefill)
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
	placed := placedOn(t, p, long)
	// Every instance 16k tokens behind but one at 9k: not twice lighter,
	// so neither the two choices (muchLighter) nor the guard would move
	// the key, but its prefill finishes first there.
	light := ""
	for _, in := range instancesOf(4) {
		if in.ID != placed && light == "" {
			light = in.ID
			p.stats.Get(in.ID).Prefill.Store(9_000)
		} else {
			p.stats.Get(in.ID).Prefill.Store(16_000)
		}
	}
	c := pick(t, p, long)
	if c.Instance().ID != light || c.Spill != SpillNone || !c.ColdPlaced {
		t.Fatalf("a new 20k-token prompt went to %s (spill %q, cold placement %v), not to %s with the least work ahead", c.Instance().ID, c.Spill, c.ColdPlaced, light)
	}
	home := c.Instance().ID
	c.Prefilled()
	c.Done()
	for _, in := range instancesOf(4) {
		p.stats.Get(in.ID).Prefill.Store(0)
	}
	if again := pick(t, p, long); again.Instance().ID != home {
		t.Fatalf("the key's next request went to %s, not %s where it was prefilled", again.Instance().ID, home)
	} else {
		again.Done()
	}
	// Moderate load at the key's home keeps it there: the cache is worth
	// more than the wait (the token guard decides when it is not).
	p.stats.Get(home).Prefill.Store(12_000)
	if c := pick(t, p, long); c.Instance().ID != home {
		t.Fatalf("a known key left its home %s for %s (spill %q) over 12k tokens", home, c.Instance().ID, c.Spill)
	} else {
		c.Done()
	}
	p.stats.Get(home).Prefill.Store(0)

	short := doc(2, 8_000) // 2k tokens: under tokenFloor
	placed = placedOn(t, p, short)
	p.stats.Get(placed).Prefill.Store(6_000)
	if c := pick(t, p, short); c.Instance().ID != placed || c.ColdPlaced {
		t.Fatalf("a new short prompt went to %s (cold placement %v), not its first choice %s", c.Instance().ID, c.ColdPlaced, placed)
	} else {
		c.Done()
	}
}
