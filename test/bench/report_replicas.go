package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/workload"
)

// oracleShareRequired is the fraction of the pooled oracle's hit rate that
// PREFIX_AWARE must reach on workload w: 95 % where most traffic shares long
// prefixes, 90 % on ShareGPT-like chats, 0 (no target) elsewhere.
func oracleShareRequired(w string) float64 {
	switch w {
	case workload.NameLongContext, workload.NameSupportBot, workload.NameRAG, workload.NameMooncake:
		return 0.95
	case workload.NameShareGPT:
		return 0.90
	}
	return 0
}

// reference is what runs of one workload in one configuration (a count
// of replicas, a count of gateways, the standalone router) measured: the
// medians that are compared and the range of p90.
type reference struct {
	runs            int
	hits            []float64 // each run's, in run order
	hit, p90        float64
	p90Low, p90High float64
	// clientP90 and cpu (router CPU seconds per request): medians.
	clientP90, cpu float64
}

// reference is the runs of workload w through one replica.
func (r *Report) reference(w string) (reference, bool) { return r.runsOf(w, 1) }

// standalone sums up the runs of workload w through one PREFIX_AWARE
// router: the strategy table's run and the replica section's one-replica
// runs, the same configuration, compared by their medians (the oracle
// target and the targets through the protocol). On Mooncake one run's hit
// rate depends on which long prompts happen to be evicted between two uses
// of their key: a reuse hits when fewer than ~200k tokens were written to
// the instance since the key's last use and misses past ~250k (1,765
// reuses in one run), and a handful of keys with 10–24 long requests each
// decide most of the difference between runs. Eleven runs of the same
// decisions spread 19.9–21.7 % (mean 21.1 %, oracle 21.9 %), so one run
// says little.
func (r *Report) standalone(w string) (reference, bool) {
	var runs []RunResult
	if x, ok := r.run(w, policy.PrefixAware); ok {
		runs = append(runs, x)
	}
	for _, x := range r.Replicas {
		if x.Workload == w && x.Replicas == 1 {
			runs = append(runs, x.RunResult)
		}
	}
	return referenceOf(runs)
}

// runsOf sums up the runs of workload w through n replicas.
func (r *Report) runsOf(w string, n int) (reference, bool) {
	var runs []RunResult
	for _, x := range r.Replicas {
		if x.Workload == w && x.Replicas == n {
			runs = append(runs, x.RunResult)
		}
	}
	return referenceOf(runs)
}

// referenceOf sets the medians and the p90 range from the runs' figures;
// false when there were no runs.
func referenceOf(runs []RunResult) (reference, bool) {
	if len(runs) == 0 {
		return reference{}, false
	}
	var ref reference
	var p90s, client, cpu []float64
	for _, x := range runs {
		ref.hits = append(ref.hits, x.HitRate)
		p90s = append(p90s, x.Summary.EngineTTFT.P90)
		client = append(client, x.Summary.TTFT.P90)
		cpu = append(cpu, x.CPUPerRequest().Seconds())
	}
	ref.runs, ref.hit, ref.p90 = len(runs), median(ref.hits), median(p90s)
	ref.p90Low, ref.p90High = slices.Min(p90s), slices.Max(p90s)
	ref.clientP90, ref.cpu = median(client), median(cpu)
	return ref, true
}

// of says what a figure was compared with.
func (ref reference) of(v float64) string {
	if ref.runs == 1 {
		return secs(v)
	}
	return fmt.Sprintf("the median %s of %d runs (%s–%s)", secs(v), ref.runs, secs(ref.p90Low), secs(ref.p90High))
}

// hitOf says which hit rate was compared.
func (ref reference) hitOf() string {
	if ref.runs == 1 {
		return fmt.Sprintf("%.1f %%", 100*ref.hit)
	}
	return fmt.Sprintf("the median %.1f %% of %d runs", 100*ref.hit, ref.runs)
}

// replicaRun is the first run of workload w through n replicas.
func (r *Report) replicaRun(w string, n int) (ReplicaRun, bool) {
	for _, x := range r.Replicas {
		if x.Workload == w && x.Replicas == n {
			return x, true
		}
	}
	return ReplicaRun{}, false
}

// loadTargets are the targets of token-aware load shared by every router
// replica: PREFIX_AWARE's tail latency against every other strategy, cold
// remapping against warm, and the runs through several router replicas.
func (r *Report) loadTargets() []Target {
	var out []Target
	others := []policy.Strategy{policy.Random, policy.LeastOutstandingRequests, Baseline}
	for _, w := range r.workloadNames() {
		pa, ok := r.run(w, policy.PrefixAware)
		if !ok {
			continue
		}
		best, bestName := math.Inf(1), ""
		for _, s := range others {
			if x, ok := r.run(w, s); ok && x.Summary.EngineTTFT.P90 < best {
				best, bestName = x.Summary.EngineTTFT.P90, string(s)
			}
		}
		if bestName == "" {
			continue
		}
		p90 := pa.Summary.EngineTTFT.P90
		out = append(out, Target{Name: "PREFIX_AWARE TTFT p90 ≤ the best of RANDOM, LEAST_OUTSTANDING_REQUESTS, SAGEMAKER_BASELINE", Workload: w,
			Measured: fmt.Sprintf("%s vs %s (%s)", secs(p90), secs(best), bestName),
			Required: "≤ the best", Met: p90 <= best, Gap: percentOver(p90, best)})
	}
	if pa, ok := r.run(workload.NameMixedLength, policy.PrefixAware); ok {
		if lor, ok := r.run(workload.NameMixedLength, policy.LeastOutstandingRequests); ok {
			a, b := pa.Summary.EngineTTFT.P90, lor.Summary.EngineTTFT.P90
			out = append(out, Target{Name: "prompt lengths ≥ 10× apart: PREFIX_AWARE TTFT p90 ≤ LEAST_OUTSTANDING_REQUESTS's", Workload: workload.NameMixedLength,
				Measured: fmt.Sprintf("%s vs %s", secs(a), secs(b)), Required: "≤", Met: a <= b, Gap: percentOver(a, b)})
		}
	}
	out = append(out, r.coldRemapTargets()...)
	out = append(out, r.replicaTargets()...)
	return append(out, r.eppTargets()...)
}

// coldRemapTargets compare a new picker's remapping with a running one's
// (warm) on N→N+1, per workload. A new picker restores the state its
// predecessor hands over (sidecar/router/picker); a picker with no
// predecessor (a router alone) starts cold, which the remap table shows
// beside it.
func (r *Report) coldRemapTargets() []Target {
	var out []Target
	for _, w := range r.workloadNames() {
		re, okr := r.remap(w+" requests, restarted", r.Config.Instances+1)
		warm, okw := r.remap(w+" requests, warm", r.Config.Instances+1)
		if !okr || !okw {
			continue
		}
		d := re.Moved - warm.Moved
		out = append(out, Target{Name: fmt.Sprintf("keys moved on %d→%d: new picker (its predecessor's state handed over) within 2 points of a running one (warm)", re.From, re.To), Workload: w,
			Measured: fmt.Sprintf("restarted %.2f %%, warm %.2f %%", 100*re.Moved, 100*warm.Moved),
			Required: "restarted − warm ≤ 2 points", Met: d <= 0.02, Gap: fmt.Sprintf("%.2f points over", 100*(d-0.02))})
	}
	return out
}

func (r *Report) remap(keys string, to int) (Remap, bool) {
	for _, m := range r.Remap {
		if m.Keys == keys && m.To == to {
			return m, true
		}
	}
	return Remap{}, false
}

// replicaTargets check the runs through several router replicas against
// the run through one.
func (r *Report) replicaTargets() []Target {
	var out []Target
	hot := ""
	if r.Config.Replicas.HotPrefix != nil {
		hot = r.Config.Replicas.HotPrefix.Name
	}
	for _, x := range r.Replicas {
		if x.Replicas < 2 || x.Workload == hot || x.Repeat > 0 {
			continue
		}
		one, ok := r.reference(x.Workload)
		if !ok {
			continue
		}
		// Repeated runs of a count (see ReplicaConfig.RepeatSpread) are
		// judged by their medians, like the one-replica reference.
		many, _ := r.runsOf(x.Workload, x.Replicas)
		frac := ratio(many.hit, one.hit)
		p90, p90One := many.p90, one.p90
		out = append(out,
			Target{Name: fmt.Sprintf("%d router replicas: hit rate ≥ 97 %% of 1 replica's", x.Replicas), Workload: x.Workload,
				Measured: fmt.Sprintf("%s vs %s = %.1f %%", many.hitOf(), one.hitOf(), 100*frac),
				Required: "≥ 97 %", Met: frac >= 0.97, Gap: points(0.97 - frac)},
			Target{Name: fmt.Sprintf("%d router replicas: TTFT p90 within 5 %% of 1 replica's", x.Replicas), Workload: x.Workload,
				Measured: fmt.Sprintf("%s vs %s (%+.1f %%)", many.of(p90), one.of(p90One), 100*(ratio(p90, p90One)-1)),
				Required: "≤ +5 %", Met: p90 <= 1.05*p90One, Gap: fmt.Sprintf("%.1f points over", 100*(ratio(p90, p90One)-1.05))})
	}
	for _, x := range r.Replicas {
		if x.Workload != hot || x.Replicas < 2 {
			continue
		}
		bound := r.Config.ConcurrencyThreshold + x.Replicas
		out = append(out, Target{Name: fmt.Sprintf("%d router replicas, hot prefix: most requests in flight on one instance (simulators' running + waiting)", x.Replicas), Workload: x.Workload,
			Measured: fmt.Sprintf("%d on %s%s", x.MaxInFlight, x.MaxInstance, allBusy(x.RunResult)),
			Required: fmt.Sprintf("≤ concurrencyThreshold + replicas = %d", bound), Met: x.MaxInFlight <= bound,
			Gap: fmt.Sprintf("%d over", x.MaxInFlight-bound)})
	}
	if rs := r.Restart; rs != nil {
		out = append(out, Target{Name: "a router replica restarted under traffic loses no request", Workload: rs.Workload,
			Measured: fmt.Sprintf("%d of %d requests failed; the restarted replica took %d after it was ready", rs.Failures, rs.Requests, rs.Served),
			Required: "0 failed", Met: rs.Failures == 0, Gap: fmt.Sprintf("%d failed", rs.Failures)})
	}
	return out
}

// allBusy notes the requests that found no instance with room, for which
// the threshold is not a limit.
func allBusy(x RunResult) string {
	if n := x.SpillReasons[policy.SpillAllBusy]; n > 0 {
		return fmt.Sprintf(" (%d requests found every instance busy)", n)
	}
	return ""
}

// percentOver says how far a is above b.
func percentOver(a, b float64) string {
	return fmt.Sprintf("%.1f %% higher", 100*(ratio(a, b)-1))
}

// replicaMarkdown renders the runs through several router replicas.
func (r *Report) replicaMarkdown(b *strings.Builder) {
	if len(r.Replicas) == 0 && r.Restart == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	c := r.Config
	p("\n## Router replicas\n\n")
	p("PREFIX_AWARE through 1 to %d replicas of the router binary sharing one picker, as the replicas of a Deployment share the one they elect: every replica gets the same `--pick-key-file`, the first `--picker self --pick-listen <address>`, the others `--picker <that address>`; the first decides every request, the others ask it over the signed pick API. In front of them a spreader in the load generator sends each request to a replica picked at random, as a Service does. Fresh simulators and replicas for every run. *Most in flight* is the highest `vllm:num_requests_running` + `vllm:num_requests_waiting` any one simulator ever had during the run (a high-water mark kept by the simulator each time it sets those gauges, so no peak falls between scrapes). TTFT is the engine's, in simulated seconds.%s\n\n",
		maxInt(c.Replicas.Counts), referenceNote(c.Replicas))
	p("| workload | replicas | hit rate | vs 1 replica | TTFT p50 | p90 | p90 vs 1 replica | client p90 | most in flight | share max/avg | spills | failures |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Replicas {
		one, ok := r.reference(x.Workload)
		vsHit, vsP90 := "", ""
		if ok && x.Replicas > 1 {
			vsHit = fmt.Sprintf("%.1f %%", 100*ratio(x.HitRate, one.hit))
			vsP90 = fmt.Sprintf("%+.1f %%", 100*(ratio(x.Summary.EngineTTFT.P90, one.p90)-1))
		}
		count := fmt.Sprint(x.Replicas)
		if x.Repeat > 0 {
			count += fmt.Sprintf(" (run %d)", x.Repeat+1)
		}
		e := x.Summary.EngineTTFT
		p("| %s | %s | %.1f %% | %s | %s | %s | %s | %s | %d | %.3f | %s | %d |\n",
			x.Workload, count, 100*x.HitRate, vsHit, secs(e.P50), secs(e.P90), vsP90, secs(x.Summary.TTFT.P90),
			x.MaxInFlight, x.Summary.ShareMaxAvg, spills(x.RunResult), x.Summary.Failures)
	}
	if h := c.Replicas.HotPrefix; h != nil {
		p("\n**Threshold across replicas** (`concurrencyThreshold` %d): the %s workload (%s) sends each burst through every replica at once, all of them asking the one picker; *most in flight* above is the figure to compare with `concurrencyThreshold` + replicas.\n",
			c.ConcurrencyThreshold, h.Name, h.Description)
	}
	if rs := r.Restart; rs != nil {
		p("\n**Restart under traffic** (%s, %d replicas): %s was taken out of the spreader %.1f s into the replay, sent SIGTERM %.1f s later (what `--drain-delay` gives requests already on their way in a cluster), started again on the same addresses, and back in the spreader %.2f s later, once ready; it took %d requests after that. %d of %d requests failed.\n",
			rs.Workload, rs.Replicas, rs.Restarted, rs.StoppedAt.Seconds(), spreaderDrain.Seconds(), rs.Down.Seconds(), rs.Served, rs.Failures, rs.Requests)
		if rs.Replayed > 0 {
			p("\nThe replay ended before the restarted replica had taken %d requests, so its last %d requests (those from the restart point on) were sent again at once; they are counted above.\n", minRestartTail, rs.Replayed)
		}
	}
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// referenceNote explains the repeated runs through one replica.
func referenceNote(rc ReplicaConfig) string {
	runs := rc.ReferenceRuns
	if runs < 2 {
		return ""
	}
	return fmt.Sprintf(" Each workload ran %d times through one replica, and *vs 1 replica* compares with the median of those runs, since one run's p90 can be far from the next one's. Where those runs' p90s were more than %.0f %% apart, every other count ran %d times too, and the targets compare the medians of each count's runs.", runs, 100*cmp.Or(rc.RepeatSpread, defaultRepeatSpread), runs)
}
