package peers

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// gauge reads one sample of a gathered metric by name and optional label.
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || hasLabel(m, label, value) {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// Three replicas, each given the same static list (itself included, as a
// benchmark would): each learns the other two's loads and placements,
// recognises itself, and counts three replicas.
func TestThreeReplicasExchange(t *testing.T) {
	g := settle(t)
	names := []string{"r0", "r1", "r2"}
	states := make([]*fakeState, 3)
	addrs := make([]string, 3)
	for i, n := range names {
		states[i] = newFakeState(int64(10 * (i + 1)))
		states[i].place(uint64(100*i+1), uint64(100*i+2))
		addrs[i], _ = serve(t, "", testOptions(n), states[i])
	}
	pullers := make([]*Puller, 3)
	regs := make([]*prometheus.Registry, 3)
	for i, n := range names {
		pullers[i], regs[i] = startPuller(t, testOptions(n), states[i], addrs...)
	}
	for i, st := range states {
		for j, peer := range names {
			if i == j {
				continue
			}
			g.Eventually(func() bool {
				return slices.Equal(st.placedHashes(peer), []uint64{uint64(100*j + 1), uint64(100*j + 2)})
			}).Should(BeTrue(), names[i]+" has "+peer+"'s placements")
		}
		g.Eventually(func() bool {
			var n int
			st.with(func(f *fakeState) { n = f.replicas })
			return n == 3
		}).Should(BeTrue(), names[i]+" counts 3 replicas")
		st.with(func(f *fakeState) {
			if _, ok := f.applied[names[i]]; ok {
				t.Errorf("%s applied its own report", names[i])
			}
			for peer, rs := range f.applied {
				last := rs[len(rs)-1]
				j := slices.Index(names, peer)
				if got, want := last.Loads[0].Requests, int64(10*(j+1)); got != want {
					t.Errorf("%s sees %s's load %d, want %d", names[i], peer, got, want)
				}
			}
		})
		// Every peer said who pulled, and acknowledged the reports it
		// applied, which are numbered by their Seq; a replica's pull of
		// itself is no peer's.
		st.with(func(f *fakeState) {
			if slices.Contains(f.pulledBy, names[i]) {
				t.Errorf("%s counted its own pull as a peer's", names[i])
			}
		})
		for j, peer := range names {
			if i == j {
				continue
			}
			g.Eventually(func() bool {
				var ok bool
				st.with(func(f *fakeState) {
					acks := f.acks[peer]
					ok = slices.Contains(f.pulledBy, peer) && len(acks) > 0 && acks[len(acks)-1] == uint64(len(f.placements))
				})
				return ok
			}).Should(BeTrue(), peer+" pulls "+names[i]+" by name and acknowledges its reports")
		}
		g.Eventually(func() float64 {
			return gauge(t, regs[i], "warmroute_router_peer_acks_total", "result", "ok")
		}).ShouldNot(BeZero(), names[i]+" counts the acknowledgements it sent")
		if f := gauge(t, regs[i], "warmroute_router_peers", "state", "fresh"); f != 2 {
			t.Errorf("%s: fresh peers %v, want 2", names[i], f)
		}
	}
	// New placements arrive incrementally: only those after the last Seq.
	states[1].place(199)
	g.Eventually(func() bool {
		return slices.Equal(states[0].placedHashes("r1"), []uint64{101, 102, 199})
	}).Should(BeTrue(), "r0 receives r1's new placement once")
}

// A peer that dies is forgotten after the stale window, the metrics say
// so, and it is used again when it comes back.
func TestDeadPeerIsForgotten(t *testing.T) {
	g := settle(t)
	a, b := newFakeState(1), newFakeState(7)
	addrB, stopB := serve(t, "", testOptions("b"), b)
	_, reg := startPuller(t, testOptions("a"), a, addrB)
	g.Eventually(func() bool {
		return gauge(t, reg, "warmroute_router_peers", "state", "fresh") == 1
	}).Should(BeTrue(), "a uses b's report")
	stopB()
	g.Eventually(func() bool {
		var forgotten []string
		a.with(func(f *fakeState) { forgotten = slices.Clone(f.forgotten) })
		return slices.Equal(forgotten, []string{"b"})
	}).Should(BeTrue(), "a forgets b")
	if got := gauge(t, reg, "warmroute_router_peers", "state", "stale"); got != 1 {
		t.Errorf("stale peers %v, want 1", got)
	}
	if got := gauge(t, reg, "warmroute_router_peers", "state", "fresh"); got != 0 {
		t.Errorf("fresh peers %v, want 0", got)
	}
	if got := gauge(t, reg, "warmroute_router_peer_report_age_seconds", "", ""); got != 0 {
		t.Errorf("report age %v with no report in use, want 0", got)
	}
	if got := gauge(t, reg, "warmroute_router_peer_pulls_total", "result", "error"); got == 0 {
		t.Error("no failed pull counted")
	}
	// Forgotten once, not on every failed pull.
	a.with(func(f *fakeState) {
		if len(f.forgotten) != 1 {
			t.Errorf("forgotten %v", f.forgotten)
		}
	})

	// b restarts on the same address; its placements are asked from the
	// beginning since a dropped what it had.
	b.place(5)
	serve(t, addrB, testOptions("b"), b)
	g.Eventually(func() bool {
		return gauge(t, reg, "warmroute_router_peers", "state", "fresh") == 1
	}).Should(BeTrue(), "a uses b again")
	if got := a.placedHashes("b"); !slices.Contains(got, 5) {
		t.Errorf("placements after b came back: %v", got)
	}
}

// A restarted peer (new Epoch, Seq counting from scratch) is asked from
// since=0, not from the Seq of its previous process.
func TestEpochChangeResetsSince(t *testing.T) {
	g := settle(t)
	a := newFakeState(0)
	old := newFakeState(3)
	old.place(1, 2, 3, 4, 5)
	addr, stop := serve(t, "", testOptions("b"), old)
	startPuller(t, testOptions("a"), a, addr)
	g.Eventually(func() bool {
		var asked bool
		old.with(func(f *fakeState) { asked = slices.Contains(f.sinces, 5) })
		return asked
	}).Should(BeTrue(), "a asks the old process from Seq 5")
	stop()

	restarted := newFakeState(3)
	restarted.place(11, 12)
	serve(t, addr, testOptions("b"), restarted)
	g.Eventually(func() bool {
		return slices.Contains(a.placedHashes("b"), 12)
	}).Should(BeTrue(), "a has the new process's placements")
	restarted.with(func(f *fakeState) {
		// The first pull may still carry the old since; the next is from 0.
		i := slices.Index(f.sinces, 0)
		if i < 0 || i > 1 {
			t.Fatalf("sinces asked of the restarted process: %v", f.sinces)
		}
		for _, s := range f.sinces[i:] {
			if s > 2 {
				t.Errorf("asked since %d of a process at Seq 2: %v", s, f.sinces)
			}
		}
	})
	got := a.placedHashes("b")
	if !slices.Contains(got, 11) || !slices.Contains(got, 12) {
		t.Errorf("placements of the restarted process: %v", got)
	}
}

// A starting replica restores the first snapshot a reachable peer serves.
func TestSnapshotOnStart(t *testing.T) {
	dead, stopDead := serve(t, "", testOptions("x"), newFakeState(0))
	stopDead()
	b := newFakeState(0)
	b.snapshot = []byte("placements of b")
	addrB, _ := serve(t, "", testOptions("b"), b)

	a := newFakeState(0)
	p, _ := startPuller(t, testOptions("a"), a, dead, addrB)
	if err := p.Bootstrap(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.with(func(f *fakeState) {
		if string(f.restored) != "placements of b" {
			t.Errorf("restored %q", f.restored)
		}
	})

	// A lone replica has nobody to learn from and does not wait.
	lone := newFakeState(0)
	p, _ = startPuller(t, testOptions("lone"), lone)
	if err := p.Bootstrap(context.Background()); err != nil {
		t.Errorf("lone replica: %v", err)
	}
}

// Reports over the limit keep their newest placements and say Truncated;
// large ones travel gzipped and arrive whole.
func TestReportsAreBoundedAndCompressed(t *testing.T) {
	g := settle(t)
	var r policy.Report
	for i := range 1000 {
		r.Placements = append(r.Placements, policy.Placement{Hash: uint64(i), Instance: "instance-0"})
	}
	body, err := encodeBounded(r, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var got policy.Report
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if len(body) > 4096 || !got.Truncated || len(got.Placements) == 0 || got.Placements[len(got.Placements)-1].Hash != 999 {
		t.Errorf("bounded report: %d bytes, truncated %v, %d placements", len(body), got.Truncated, len(got.Placements))
	}

	b := newFakeState(0)
	for i := range 1000 {
		b.place(uint64(i))
	}
	addr, _ := serve(t, "", testOptions("b"), b)
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+ReportPath+"?since=0", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if err := json.Unmarshal(plain, &got); err != nil || len(got.Placements) != 1000 || got.Replica != "b" || got.Epoch == 0 {
		t.Fatalf("gzipped report: %v, %d placements, replica %q epoch %d", err, len(got.Placements), got.Replica, got.Epoch)
	}

	a := newFakeState(0)
	startPuller(t, testOptions("a"), a, addr)
	g.Eventually(func() bool { return len(a.placedHashes("b")) == 1000 }).Should(BeTrue(), "a receives all 1000 placements")

	// A puller with a smaller limit refuses the answer as invalid.
	small := testOptions("c")
	small.MaxReportBytes = 1024
	_, reg := startPuller(t, small, newFakeState(0), addr)
	g.Eventually(func() bool {
		return gauge(t, reg, "warmroute_router_peer_pulls_total", "result", "invalid") > 0
	}).Should(BeTrue(), "oversized answers counted invalid")
}

func TestServerRefusesBadSince(t *testing.T) {
	addr, _ := serve(t, "", testOptions("b"), newFakeState(0))
	resp, err := http.Get("http://" + addr + ReportPath + "?since=-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// A peer may hold a report for StaleAfter past its last pull, plus the
// failing pull that notices it and one interval.
func TestHeldFor(t *testing.T) {
	if got, want := (Options{}).HeldFor(), DefaultStaleAfter+DefaultStaleAfter/2+DefaultInterval; got != want {
		t.Fatalf("HeldFor with defaults %v, want %v", got, want)
	}
	if got, want := (Options{Interval: 2 * time.Second, StaleAfter: time.Second}).HeldFor(), 5*time.Second; got != want {
		t.Fatalf("HeldFor with a 2 s interval %v, want %v", got, want)
	}
}

// TestLongPrefillPokesPeers: a replica that sends a long prefill pokes its
// peers, which pull its report at once instead of at their next tick (an
// hour away here).
func TestLongPrefillPokesPeers(t *testing.T) {
	g := settle(t)
	optsA, optsB := testOptions("a"), testOptions("b")
	optsA.Interval, optsB.Interval = time.Hour, time.Hour
	stA, stB := newFakeState(1), newFakeState(2)
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, b := NewPuller(optsA, stA, regA, logr.Discard()), NewPuller(optsB, stB, regB, logr.Discard())
	addrA, _ := serveWaking(t, "", optsA, stA, a)
	addrB, _ := serveWaking(t, "", optsB, stB, b)
	runPuller(t, a, addrB)
	runPuller(t, b, addrA)
	// Each pulls the other once at start; B must know A's name from its
	// report before A's poke can wake the right peer.
	g.Eventually(func() int { return stB.appliedFrom("a") }).Should(Equal(1))
	g.Eventually(func() int { return stB.pulls("a") }).Should(Equal(1))

	stA.long <- struct{}{}
	g.Eventually(func() int { return stA.pulls("b") }).Should(Equal(2), "B pulls A at once")
	g.Expect(gauge(t, regA, "warmroute_router_peer_pokes_total", "result", "ok")).To(Equal(1.0))
	g.Consistently(func() int { return stB.pulls("a") }, 100*time.Millisecond).Should(Equal(1), "A pulls B at its tick only")
}
