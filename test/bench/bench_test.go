package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/workload"
)

// TestShortBenchmark runs the whole harness at a small size (the Short
// configuration: 4 instances, two workloads, every strategy, 1 and 2
// router replicas) so that it cannot rot. It checks what must hold whatever the machine's speed:
//
//   - every request of every run succeeds through the real router binary;
//   - the hit rates come from the simulators' counters and are sane: the
//     pooled oracle beats RANDOM, and PREFIX_AWARE beats RANDOM on the
//     long-context workload by a clear margin (at least 20 points);
//   - remap, decision latency, proxy overhead and the forwarding hop
//     were measured;
//   - every replica run and the restart served every request, the
//     replicas were peeked and answered, and the simulators' high-water
//     mark saw the requests in flight;
//   - every request through the Endpoint Picker Protocol was placed by the
//     picker and served, and its accounting ended with its response;
//   - requests sent to a router at zero instances were held and all
//     answered by the instance the harness started, none before its
//     model load ended or before it was published;
//   - the report renders, with its tables and every plot as a PNG.
//
// It asserts nothing about wall-clock figures.
func TestShortBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the router and runs for about a minute and a half")
	}
	cfg := Short(1)
	cfg.Command = "go test ./test/bench"
	cfg.WorkDir = t.TempDir()
	cfg.Log = t.Logf
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}

	if want := len(cfg.Workloads) * 4; len(rep.Runs) != want {
		t.Fatalf("%d runs, want %d", len(rep.Runs), want)
	}
	for _, r := range rep.Runs {
		if r.Summary.Failures != 0 || r.Summary.Requests == 0 {
			t.Errorf("%s × %s: %d of %d requests failed", r.Workload, r.Strategy, r.Summary.Failures, r.Summary.Requests)
		}
		if r.QueryTokens == 0 {
			t.Errorf("%s × %s: the simulators counted no prompt tokens", r.Workload, r.Strategy)
		}
	}
	random, _ := rep.run(workload.NameLongContext, policy.Random)
	prefix, _ := rep.run(workload.NameLongContext, policy.PrefixAware)
	oracle := rep.Oracles[workload.NameLongContext]
	if prefix.HitRate < random.HitRate+0.20 {
		t.Errorf("long-context: PREFIX_AWARE hit rate %.3f, RANDOM %.3f: want a margin of at least 20 points", prefix.HitRate, random.HitRate)
	}
	if oracle.HitRate <= random.HitRate {
		t.Errorf("long-context: pooled oracle %.3f does not beat RANDOM %.3f", oracle.HitRate, random.HitRate)
	}
	if len(rep.Remap) == 0 || len(rep.Decision) == 0 || rep.Proxy.Samples == 0 {
		t.Errorf("measurements: %d remaps, %d decision sizes, %d proxy samples", len(rep.Remap), len(rep.Decision), rep.Proxy.Samples)
	}
	for _, m := range rep.Remap {
		if m.Moved <= 0 || m.Moved > 1 || m.Ideal <= 0 {
			t.Errorf("remap %+v out of range", m)
		}
	}

	checkReplicas(t, cfg, rep)
	checkEPP(t, cfg, rep)
	checkFromZero(t, cfg, rep)

	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Targets", "### long-context", "### support-bot", "pooled oracle", "SAGEMAKER_BASELINE", "## Remap on scale", "added by the router", "## Router replicas", "Restart under traffic", "## Through the Endpoint Picker Protocol", "## From zero", cfg.Command} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	plots := []string{PlotHitRate, PlotTTFTP50, PlotTTFTP90, PlotShare, PlotRemap}
	for _, w := range cfg.Workloads {
		plots = append(plots, PlotInstanceShare(w.Name))
	}
	for _, p := range plots {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", p)
		}
		if !strings.Contains(string(md), "("+p+")") {
			t.Errorf("benchmarks.md does not show %s", p)
		}
	}
}

// checkReplicas checks the runs through several router replicas: each ran,
// served every request and measured what its targets need.
func checkReplicas(t *testing.T, cfg Config, rep *Report) {
	t.Helper()
	names := []string{workload.NameSupportBot, workload.NameHotPrefix}
	if want := len(names) * len(cfg.Replicas.Counts); len(rep.Replicas) != want {
		t.Fatalf("%d replica runs, want %d", len(rep.Replicas), want)
	}
	for _, w := range names {
		for _, n := range cfg.Replicas.Counts {
			x, ok := rep.replicaRun(w, n)
			switch {
			case !ok:
				t.Errorf("%s × %d replicas: not run", w, n)
			case x.Summary.Failures != 0 || x.Summary.Requests == 0:
				t.Errorf("%s × %d replicas: %d of %d requests failed", w, n, x.Summary.Failures, x.Summary.Requests)
			case x.MaxInFlight < 1 || x.QueryTokens == 0:
				t.Errorf("%s × %d replicas: the simulators saw nothing (most in flight %d, %d prompt tokens)", w, n, x.MaxInFlight, x.QueryTokens)
			case w == workload.NameHotPrefix && overThreshold(t, x.RunResult, x.MaxInFlight, rep.Config.ConcurrencyThreshold):
				t.Errorf("hot prefix × %d replicas: %d requests at once on one instance, over the threshold %d", n, x.MaxInFlight, rep.Config.ConcurrencyThreshold)
			}
		}
	}
	rs := rep.Restart
	if rs == nil {
		t.Fatal("no restart run")
	}
	if rs.Failures != 0 || rs.Requests == 0 {
		t.Errorf("restart: %d of %d requests failed", rs.Failures, rs.Requests)
	}
	if rs.Down <= 0 || rs.Served < minRestartTail {
		t.Errorf("restart: down for %s, then took %d requests", rs.Down, rs.Served)
	}
}

// checkEPP checks the runs through the Endpoint Picker Protocol: each
// workload (and the hot prefix) ran through each count of gateways, every
// request was placed by the picker and served, and every request's
// accounting ended with its response.
func checkEPP(t *testing.T, cfg Config, rep *Report) {
	t.Helper()
	if want := (len(cfg.Workloads) + 1) * len(cfg.EPPGateways); len(rep.EPP) != want {
		t.Fatalf("%d runs through the protocol, want %d", len(rep.EPP), want)
	}
	for _, x := range rep.EPP {
		switch {
		case x.Summary.Failures != 0 || x.Summary.Requests == 0:
			t.Errorf("%s through the protocol: %d of %d requests failed", x.Workload, x.Summary.Failures, x.Summary.Requests)
		case x.Placed != x.Summary.Requests:
			t.Errorf("%s through the protocol: %d of %d requests placed by the picker", x.Workload, x.Placed, x.Summary.Requests)
		case x.LeftInFlight != 0:
			t.Errorf("%s through the protocol: %v requests still in flight after every response ended", x.Workload, x.LeftInFlight)
		case x.QueryTokens == 0 || x.AddedP50 <= 0:
			t.Errorf("%s through the protocol: nothing measured (%d prompt tokens, added p50 %s)", x.Workload, x.QueryTokens, x.AddedP50)
		case x.Workload == workload.NameHotPrefix && overThreshold(t, x.RunResult, x.MaxInFlight, rep.Config.ConcurrencyThreshold+1):
			// The bound of the replica targets for one router
			// (concurrencyThreshold + replicas).
			t.Errorf("hot prefix through the protocol: %d requests at once on one instance, over the threshold %d + 1", x.MaxInFlight, rep.Config.ConcurrencyThreshold)
		}
	}
}

// overThreshold reports whether a run put more than limit requests on one
// instance although no request found every instance busy. A request that
// does overflows above the threshold by design (policy.SpillAllBusy), and
// the short configuration's bursts, replayed at a twentieth of their
// simulated time, find every instance busy when a loaded host finishes the
// previous burst late; that is logged, not failed.
func overThreshold(t *testing.T, x RunResult, most, limit int) bool {
	t.Helper()
	if most <= limit {
		return false
	}
	if busy := allBusy(x); busy != "" {
		t.Logf("%s: %d requests at once on one instance, over %d%s", x.Workload, most, limit, busy)
		return false
	}
	return true
}

// checkFromZero checks the activation from zero: the router held the
// requests and counted an activation, the harness started and published
// the instance in that order, and every request was answered, none before
// the instance was published (so none before its model load ended).
func checkFromZero(t *testing.T, cfg Config, rep *Report) {
	t.Helper()
	if len(rep.FromZero) != cfg.FromZero.Runs {
		t.Fatalf("%d activations from zero, want %d", len(rep.FromZero), cfg.FromZero.Runs)
	}
	for i, x := range rep.FromZero {
		if n := x.failures(); n != 0 {
			t.Errorf("from zero, run %d: %d of %d requests failed", i+1, n, len(x.Requests))
		}
		if x.HeldPeak < 1 || x.atZero() < 1 {
			t.Errorf("from zero, run %d: %d held at peak, %d sent at zero: nothing was held", i+1, x.HeldPeak, x.atZero())
		}
		if x.Noticed < 0 || x.Listening < x.Noticed+x.LoadDelay || x.Published < x.Listening {
			t.Errorf("from zero, run %d: noticed %s, listening %s, published %s: out of order for a %s load", i+1, x.Noticed, x.Listening, x.Published, x.LoadDelay)
		}
		for j, q := range x.Requests {
			if q.Err == "" && q.Sent+q.TTFT < x.Published {
				t.Errorf("from zero, run %d: request %d had its first token at %s, before the instance was published at %s", i+1, j, q.Sent+q.TTFT, x.Published)
			}
		}
	}
}
