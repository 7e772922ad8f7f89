package bench

import (
	"fmt"
	"strings"
)

// baselineMarkdown is the before/after section: the baseline revision's
// router and this one, measured in the same run.
func (r *Report) baselineMarkdown(b *strings.Builder) {
	if r.BaselineRevision == "" {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	rev := r.BaselineRevision
	p("\n## Before and after: `%s` and this revision, in this run\n\n", rev)
	p("The router of revision `%s` (checked out and built by the benchmark) ran the same PREFIX_AWARE workloads on the same fresh simulators, alone and as two replicas behind the same spreader. TTFT is the engine's, in simulated seconds. *Most in flight* is the highest running + waiting any one simulator had.\n\n", rev)
	p("| workload | routers | hit rate before | after | TTFT p50 before | after | TTFT p90 before | after | p90 change | most in flight before | after | failures before / after |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	row := func(w string, n int, before, after RunResult, maxBefore, maxAfter string) {
		eb, ea := before.Summary.EngineTTFT, after.Summary.EngineTTFT
		p("| %s | %d | %.1f %% | %.1f %% | %s | %s | %s | %s | %+.1f %% | %s | %s | %d / %d |\n",
			w, n, 100*before.HitRate, 100*after.HitRate, secs(eb.P50), secs(ea.P50), secs(eb.P90), secs(ea.P90),
			100*(ratio(ea.P90, eb.P90)-1), maxBefore, maxAfter, before.Summary.Failures, after.Summary.Failures)
	}
	paired := r.beforeAfterPairs()
	replicaRow := func(i int) {
		if ax, ok := paired[i]; ok {
			bx := r.BeforeReplicas[i]
			row(bx.Workload, bx.Replicas, bx.RunResult, ax.RunResult, fmt.Sprint(bx.MaxInFlight), fmt.Sprint(ax.MaxInFlight))
		}
	}
	for _, before := range r.Before {
		if after, ok := r.run(before.Workload, before.Strategy); ok {
			row(before.Workload, 1, before, after, "", "")
		}
		for i, bx := range r.BeforeReplicas {
			if bx.Workload == before.Workload {
				replicaRow(i)
			}
		}
	}
	for i, bx := range r.BeforeReplicas {
		if !r.hasBefore(bx.Workload) {
			replicaRow(i)
		}
	}
	if bp := r.BeforeProxy; bp != nil {
		ap := r.Proxy
		p("\n**Added proxy latency** (as in *Router costs*, the two binaries in turn, request by request): `%s` p50 %s, p99 %s; this revision p50 %s, p99 %s.\n",
			rev, micros(bp.AddedP50), micros(bp.AddedP99), micros(ap.AddedP50), micros(ap.AddedP99))
	}
	if len(r.DecisionBench) == 2 {
		bd, ad := r.DecisionBench[0], r.DecisionBench[1]
		p("\n**Decision** (`BenchmarkDecision/PREFIX_AWARE/chat/64KiB` in `sidecar/router/proxy`: extract + decide for 64 KiB chat bodies over 8 instances, 5000 decisions a round; the two trees' benchmarks run alternately, %d rounds each; medians of the rounds):\n\n", bd.Rounds)
		p("| revision | ns/op | p50 | p99 | B/op | allocs/op | p99 of each round |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, d := range r.DecisionBench {
			p("| %s | %.0f | %.1f µs | %.1f µs | %.0f | %.0f | %s |\n", d.Revision, d.NsPerOp, d.P50us, d.P99us, d.BytesPerOp, d.AllocsPerOp, floats(d.RawP99))
		}
		p("\np99 change: %+.1f %%; p50 change: %+.1f %%.\n", 100*(ratio(ad.P99us, bd.P99us)-1), 100*(ratio(ad.P50us, bd.P50us)-1))
	}
}

// beforeAfterPairs pairs each of the baseline's replica runs (by index in
// BeforeReplicas) with this revision's run it was measured next to: the
// k-th baseline run of a workload and count goes with the k-th first run
// (Repeat 0) of the same. A workload can be measured twice with the same
// count (hot-prefix: as a workload, then as the threshold measurement),
// and pairing every baseline run with the first such run put the
// threshold run's "before" next to the workload run's "after" (11 next
// to 10, where the threshold run read 15).
func (r *Report) beforeAfterPairs() map[int]ReplicaRun {
	type key struct {
		w string
		n int
	}
	runs := map[key][]ReplicaRun{}
	for _, x := range r.Replicas {
		if x.Repeat == 0 {
			k := key{x.Workload, x.Replicas}
			runs[k] = append(runs[k], x)
		}
	}
	out := map[int]ReplicaRun{}
	taken := map[key]int{}
	for i, bx := range r.BeforeReplicas {
		k := key{bx.Workload, bx.Replicas}
		if j := taken[k]; j < len(runs[k]) {
			out[i] = runs[k][j]
		}
		taken[k]++
	}
	return out
}

func (r *Report) hasBefore(w string) bool {
	for _, x := range r.Before {
		if x.Workload == w {
			return true
		}
	}
	return false
}

func floats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}
