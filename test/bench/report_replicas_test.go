package bench

import (
	"math"
	"strings"
	"testing"
)

// TestReplicaTargetsUseTheMedianReference: the replica rows are judged
// against the median of the repeated one-replica runs, not the first one.
func TestReplicaTargetsUseTheMedianReference(t *testing.T) {
	run := func(n, repeat int, hit, p90 float64) ReplicaRun {
		x := ReplicaRun{Replicas: n, Repeat: repeat}
		x.Workload, x.HitRate, x.Summary.EngineTTFT.P90 = "mixed-length", hit, p90
		return x
	}
	r := &Report{Replicas: []ReplicaRun{
		run(1, 0, 0.50, 0.118), // an outlier draw first
		run(1, 1, 0.52, 0.261),
		run(1, 2, 0.51, 0.278),
		run(2, 0, 0.50, 0.270),
	}}
	var hit, p90 *Target
	for _, x := range r.replicaTargets() {
		switch {
		case strings.Contains(x.Name, "hit rate"):
			hit = &x
		case strings.Contains(x.Name, "p90"):
			p90 = &x
		}
	}
	if hit == nil || p90 == nil {
		t.Fatalf("targets missing: %+v", r.replicaTargets())
	}
	if !p90.Met || !strings.Contains(p90.Measured, "the median 261 ms of 3 runs (118 ms–278 ms)") {
		t.Errorf("p90 target %+v, want met against the median 261 ms", *p90)
	}
	if !hit.Met || !strings.Contains(hit.Measured, "the median 51.0 % of 3 runs") {
		t.Errorf("hit target %+v, want met against the median 51.0 %%", *hit)
	}
}

// TestRepeatedCountsAreJudgedByTheirMedians: when a count above one ran
// several times (the one-replica runs spread too far to judge one run),
// its targets use the median of its runs.
func TestRepeatedCountsAreJudgedByTheirMedians(t *testing.T) {
	run := func(n, repeat int, hit, p90 float64) ReplicaRun {
		x := ReplicaRun{Replicas: n, Repeat: repeat}
		x.Workload, x.HitRate, x.Summary.EngineTTFT.P90 = "rag", hit, p90
		return x
	}
	r := &Report{Replicas: []ReplicaRun{
		run(1, 0, 0.52, 0.131),
		run(1, 1, 0.52, 0.266),
		run(1, 2, 0.52, 0.324),
		run(2, 0, 0.52, 0.318), // the first draw alone would miss
		run(2, 1, 0.52, 0.177),
		run(2, 2, 0.52, 0.266),
	}}
	targets := r.replicaTargets()
	var p90 []Target
	for _, x := range targets {
		if strings.Contains(x.Name, "p90") {
			p90 = append(p90, x)
		}
	}
	if len(p90) != 1 {
		t.Fatalf("want one p90 target for the three runs of 2 replicas, got %+v", targets)
	}
	if !p90[0].Met || !strings.Contains(p90[0].Measured, "the median 266 ms of 3 runs (177 ms–318 ms) vs the median 266 ms of 3 runs") {
		t.Errorf("p90 target %+v, want the medians compared", p90[0])
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{0.2}, 0}, {[]float64{0.2, 0.25, 0.21}, 0.25}, {[]float64{0, 1}, 0}} {
		if got := spread(c.xs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("spread(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestBeforeAfterPairsEachMeasurement: hot-prefix runs twice with two
// replicas (as a workload, then as the threshold measurement), and each
// baseline run is compared with the run of this revision measured next to
// it, not both with the first.
func TestBeforeAfterPairsEachMeasurement(t *testing.T) {
	run := func(n, repeat, most int) ReplicaRun {
		x := ReplicaRun{Replicas: n, Repeat: repeat}
		x.Workload, x.MaxInFlight = "hot-prefix", most
		return x
	}
	r := &Report{
		BaselineRevision: "abc1234",
		Replicas:         []ReplicaRun{run(1, 0, 10), run(2, 0, 10), run(2, 1, 12), run(3, 0, 11), run(2, 0, 15), run(3, 0, 10)},
		BeforeReplicas:   []ReplicaRun{run(2, 0, 10), run(2, 0, 11)},
	}
	pairs := r.beforeAfterPairs()
	if got := []int{pairs[0].MaxInFlight, pairs[1].MaxInFlight}; got[0] != 10 || got[1] != 15 {
		t.Fatalf("after runs paired with the baseline's: most in flight %v, want [10 15]", got)
	}
	var b strings.Builder
	r.baselineMarkdown(&b)
	if !strings.Contains(b.String(), "| 11 | 15 |") {
		t.Errorf("the threshold row does not compare 11 with 15:\n%s", b.String())
	}
}

// TestOracleTargetUsesEveryOneRouterRun: the hit rate against the pooled
// oracle is the median of the strategy table's run and the one-replica
// runs (the same configuration), and an even count takes the mean of the
// middle two rather than flattering the router with the upper one.
func TestOracleTargetUsesEveryOneRouterRun(t *testing.T) {
	one := func(hit float64) ReplicaRun {
		x := ReplicaRun{Replicas: 1}
		x.Workload, x.HitRate = "mooncake", hit
		return x
	}
	two := one(0.30)
	two.Replicas = 2 // another count: not a one-router run
	r := &Report{
		Config:   Config{Workloads: []WorkloadSpec{{Name: "mooncake"}}},
		Runs:     []RunResult{{Workload: "mooncake", Strategy: "PREFIX_AWARE", HitRate: 0.205}},
		Oracles:  map[string]Oracle{"mooncake": {HitRate: 0.219}},
		Replicas: []ReplicaRun{one(0.208), one(0.212), one(0.216), two},
	}
	var got *Target
	for _, x := range r.Targets() {
		if strings.Contains(x.Name, "pooled oracle") {
			got = &x
		}
	}
	if got == nil {
		t.Fatal("no oracle target")
	}
	// Median of 20.5, 20.8, 21.2, 21.6 = 21.0 % = 95.9 % of 21.9 %.
	if !got.Met || !strings.Contains(got.Measured, "the median 21.0 % of 4 runs (20.5–21.6 %; the table's run 20.5 % = 93.6 %) of 21.9 % = 95.9 %") {
		t.Errorf("oracle target %+v", *got)
	}
	r.Replicas = r.Replicas[:1] // 20.5 and 20.8: mean 20.65 % = 94.3 %
	for _, x := range r.Targets() {
		if strings.Contains(x.Name, "pooled oracle") && (x.Met || !strings.Contains(x.Measured, "= 94.3 %")) {
			t.Errorf("two runs: %+v, want missed at 94.3 %%", x)
		}
	}
}

// TestEPPTargetsUseTheStandaloneMedian: a run through the protocol is
// judged against the median of every one-router standalone run of its
// workload (the strategy table's and the one-replica runs).
func TestEPPTargetsUseTheStandaloneMedian(t *testing.T) {
	one := func(hit, p90 float64) ReplicaRun {
		x := ReplicaRun{Replicas: 1}
		x.Workload, x.HitRate, x.Summary.EngineTTFT.P90 = "long-context", hit, p90
		return x
	}
	epp := EPPRun{Gateways: 1}
	epp.Workload, epp.HitRate, epp.Summary.EngineTTFT.P90 = "long-context", 0.877, 0.370
	pa := one(0.869, 0.363).RunResult
	pa.Strategy = "PREFIX_AWARE"
	r := &Report{Runs: []RunResult{pa}, Replicas: []ReplicaRun{one(0.895, 0.353), one(0.886, 0.358), one(0.889, 0.355)}, EPP: []EPPRun{epp}}
	targets := r.eppTargets()
	if len(targets) != 2 {
		t.Fatalf("targets %+v", targets)
	}
	hit, p90 := targets[0], targets[1]
	// The median of 86.9, 89.5, 88.6, 88.9 is 88.75: 87.7 is 1.05 under.
	if hit.Met || !strings.Contains(hit.Measured, "the median 88.8 % of 4 runs") {
		t.Errorf("hit target %+v, want missed against the median 88.75 %%", hit)
	}
	// The median of the p90s is 356.5 ms: 370 ms is 3.8 % over.
	if !p90.Met || !strings.Contains(p90.Measured, "+3.8 %") {
		t.Errorf("p90 target %+v, want met at +3.8 %%", p90)
	}
	// A second run through the protocol: its runs are judged by their
	// median, 88.85 % (88.9 %).
	again := epp
	again.Repeat, again.HitRate = 1, 0.900
	r.EPP = append(r.EPP, again)
	targets = r.eppTargets()
	if len(targets) != 2 || !targets[0].Met || !strings.Contains(targets[0].Measured, "the median 88.9 % of 2 runs vs the median 88.8 % of 4 runs") {
		t.Errorf("targets %+v, want the hit rate met by the median of both runs", targets)
	}
}
