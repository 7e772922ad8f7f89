package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/test/workload"
)

func (r *Report) workloadNames() []string {
	var out []string
	for _, w := range r.Config.Workloads {
		out = append(out, w.Name)
	}
	return out
}

func (r *Report) run(w string, s policy.Strategy) (RunResult, bool) {
	for _, x := range r.Runs {
		if x.Workload == w && x.Strategy == s {
			return x, true
		}
	}
	return RunResult{}, false
}

// Target is one of the targets, checked against this run.
type Target struct {
	Name     string
	Workload string
	Measured string
	Required string
	Met      bool
	// Gap says by how much a missed target was missed.
	Gap string
}

// Targets evaluates the targets the report is judged by. TTFT targets use
// the engine-side TTFT: exact in simulated time, whereas the client-side
// one carries the host's scheduling delays multiplied by 1/time scale.
func (r *Report) Targets() []Target {
	var out []Target
	pa := policy.PrefixAware
	for _, w := range r.workloadNames() {
		run, ok := r.run(w, pa)
		o, hasOracle := r.Oracles[w]
		req := oracleShareRequired(w)
		if !ok || !hasOracle || o.HitRate == 0 || req == 0 {
			continue
		}
		ref, _ := r.standalone(w)
		hits := ref.hits
		hit := median(hits)
		frac := hit / o.HitRate
		measured := fmt.Sprintf("%.1f %% of %.1f %% = %.1f %%", 100*hit, 100*o.HitRate, 100*frac)
		if len(hits) > 1 {
			measured = fmt.Sprintf("the median %.1f %% of %d runs (%.1f–%.1f %%; the table's run %.1f %% = %.1f %%) of %.1f %% = %.1f %%",
				100*hit, len(hits), 100*slices.Min(hits), 100*slices.Max(hits), 100*run.HitRate, 100*run.HitRate/o.HitRate, 100*o.HitRate, 100*frac)
		}
		out = append(out, Target{
			Name: "PREFIX_AWARE hit rate as a share of the pooled oracle's", Workload: w,
			Measured: measured,
			Required: fmt.Sprintf("≥ %.0f %%", 100*req), Met: frac >= req, Gap: points(req - frac),
		})
	}
	for _, w := range r.workloadNames() {
		run, ok := r.run(w, pa)
		base, ok2 := r.run(w, Baseline)
		if !ok || !ok2 {
			continue
		}
		hitGain := ratio(float64(run.HitTokens), float64(base.HitTokens))
		p90Cut := 1 - ratio(run.Summary.EngineTTFT.P90, base.Summary.EngineTTFT.P90)
		t := Target{
			Name: "PREFIX_AWARE ≥ SageMaker-style baseline on hit rate and p90 TTFT", Workload: w,
			Measured: fmt.Sprintf("hit %.1f %% vs %.1f %%; p90 %s vs %s",
				100*run.HitRate, 100*base.HitRate, secs(run.Summary.EngineTTFT.P90), secs(base.Summary.EngineTTFT.P90)),
			Required: "both at least as good",
			Met:      run.HitRate >= base.HitRate && run.Summary.EngineTTFT.P90 <= base.Summary.EngineTTFT.P90,
		}
		if !t.Met {
			var gaps []string
			if run.HitRate < base.HitRate {
				gaps = append(gaps, "hit rate "+points(base.HitRate-run.HitRate))
			}
			if run.Summary.EngineTTFT.P90 > base.Summary.EngineTTFT.P90 {
				gaps = append(gaps, fmt.Sprintf("p90 %.0f %% higher", 100*(ratio(run.Summary.EngineTTFT.P90, base.Summary.EngineTTFT.P90)-1)))
			}
			t.Gap = strings.Join(gaps, ", ")
		}
		out = append(out, t)
		if w == workload.NameSupportBot || w == workload.NameRAG {
			out = append(out, Target{
				Name: "PREFIX_AWARE clearly better than the baseline", Workload: w,
				Measured: fmt.Sprintf("%+.0f %% hit tokens, %.0f %% lower p90 TTFT", 100*(hitGain-1), 100*p90Cut),
				Required: "≥ +10 % hit tokens or ≥ 20 % lower p90",
				Met:      hitGain >= 1.10 || p90Cut >= 0.20,
				Gap:      fmt.Sprintf("%.0f points short on hit tokens, %.0f on p90", 100*(1.10-hitGain), 100*(0.20-p90Cut)),
			})
		}
	}
	if run, ok := r.run(workload.NameLongContext, pa); ok {
		if rnd, ok := r.run(workload.NameLongContext, policy.Random); ok {
			cut50 := 1 - ratio(run.Summary.EngineTTFT.P50, rnd.Summary.EngineTTFT.P50)
			cut90 := 1 - ratio(run.Summary.EngineTTFT.P90, rnd.Summary.EngineTTFT.P90)
			out = append(out,
				Target{Name: "p50 TTFT lower than RANDOM (Amazon: 71–77 %)", Workload: workload.NameLongContext,
					Measured: fmt.Sprintf("%s vs %s: %.0f %% lower", secs(run.Summary.EngineTTFT.P50), secs(rnd.Summary.EngineTTFT.P50), 100*cut50),
					Required: "≥ 75 % lower", Met: cut50 >= 0.75, Gap: points(0.75 - cut50)},
				Target{Name: "p90 TTFT lower than RANDOM (Amazon: 33–37 %)", Workload: workload.NameLongContext,
					Measured: fmt.Sprintf("%s vs %s: %.0f %% lower", secs(run.Summary.EngineTTFT.P90), secs(rnd.Summary.EngineTTFT.P90), 100*cut90),
					Required: "≥ 40 % lower", Met: cut90 >= 0.40, Gap: points(0.40 - cut90)})
		}
	}
	for _, w := range r.workloadNames() {
		if run, ok := r.run(w, pa); ok {
			m := run.Summary.ShareMaxAvg
			out = append(out, Target{Name: "PREFIX_AWARE per-instance request share max/avg", Workload: w,
				Measured: fmt.Sprintf("%.3f", m), Required: "≤ 1.10", Met: m <= 1.10,
				Gap: fmt.Sprintf("%.3f over", m-1.10)})
		}
	}
	for _, m := range r.Remap {
		if m.To == r.Config.Instances+1 && strings.HasSuffix(m.Keys, "distinct prefixes") { // default tuning
			d := math.Abs(m.Moved - m.Ideal)
			out = append(out, Target{Name: fmt.Sprintf("keys moved on %d→%d within 0.5 points of 1/%d", m.From, m.To, m.To), Workload: m.Keys,
				Measured: fmt.Sprintf("%.2f %% (ideal %.2f %%), %.2f %% between survivors", 100*m.Moved, 100*m.Ideal, 100*m.BetweenSurvivors),
				Required: "|moved − ideal| ≤ 0.5 points", Met: d <= 0.005, Gap: fmt.Sprintf("%.2f points off", 100*d-0.5)})
		}
	}
	out = append(out, r.loadTargets()...)
	return append(out, r.fromZeroTargets()...)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return a / b
}

// points renders a shortfall of fractions as percentage points.
func points(short float64) string { return fmt.Sprintf("%.1f points short", 100*short) }

func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", 1000*s)
	}
	return fmt.Sprintf("%.2f s", s)
}

// spills renders the spill rate with its reasons.
func spills(x RunResult) string {
	out := fmt.Sprintf("%.1f %%", 100*x.SpillRate)
	var parts []string
	for _, reason := range []string{policy.SpillConcurrency, policy.SpillAllBusy, policy.SpillTokens, policy.SpillUnhealthy} {
		if n := x.SpillReasons[reason]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", strings.ReplaceAll(reason, "_", " "), n))
		}
	}
	if len(parts) > 0 {
		out += " (" + strings.Join(parts, ", ") + ")"
	}
	return out
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	c := r.Config
	p("# Benchmarks\n\n")
	r.summaryMarkdown(&b)
	p("Generated by `%s` on %s in %s. Every figure below comes from that one run; rerun the command to reproduce it (the workloads are generated from seed %d, so only timing noise differs between runs).\n\n",
		c.Command, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Elapsed.Round(time.Second), c.Seed)
	p("**Revision:** `%s` (the router is built from the working tree).\n\n", r.Revision)
	p("**Machine:** %d CPUs (`nproc`), %s, %s %s/%s, load average %s at the start. The simulators, the router and the load generator share these CPUs with whatever else runs.\n\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.GoVersion, r.Machine.OS, r.Machine.Arch, r.Machine.LoadAverage)

	p("## Setup\n\n")
	p("- **Fleet:** %d simulated vLLM instances (`test/vllmsim`) on loopback, in front of them the real router binary (`sidecar/cmd/router`, built by the benchmark) reading a routing document with `prefixLength` %d and `concurrencyThreshold` %d. Every workload × strategy run starts a fresh router and cold simulators.\n",
		c.Instances, c.PrefixLength, c.ConcurrencyThreshold)
	p("- **Simulated engine:** Llama-3.1-70B-on-8×H100-like defaults: prefill %d tokens/s, decode step %s, %d-token KV blocks chained by hash with LRU eviction, at most %d running requests and %d batched tokens per step, %d characters per token.\n",
		vllmsim.DefaultPrefillTokensPerSec, vllmsim.DefaultDecodeStep, vllmsim.DefaultBlockSize, vllmsim.DefaultMaxRunning, vllmsim.DefaultMaxBatchedTokens, vllmsim.DefaultCharsPerToken)
	p("- **KV cache per instance: %d tokens** (%d for the pooled oracle), fixed for every workload and strategy. It is sized so that RANDOM's hit rate on the long-context workload lands near the ~25 %% Amazon reports for random routing; the measured value is in the first table. `max_model_len` %d.\n",
		c.CacheTokens, c.CacheTokens*c.Instances, c.MaxModelLen)
	p("- **Time:** simulators run time-scaled (a simulated second lasts `time scale` wall seconds) and the driver replays arrivals on the same scale, open-loop: each request is sent at its arrival time whatever the previous ones did (except a conversation's next turn, which waits for the previous answer), so every strategy gets the same offered load. All times below are simulated seconds. *Client-side TTFT* is measured by the load generator at the first streamed content chunk, through the router, and converted back by the time scale (so the real router and loopback overhead is multiplied by 1/scale too); *engine TTFT* is what the simulator itself reports (queueing + prefill), which leaves out the router's own delays; host delays still move when requests reach the simulators and how fresh the routers' picture is when they decide, and 1/scale magnifies them, so mixed-length, whose p90 sits on the knee between warm requests and cold documents, runs at a slower time scale than the others (the table below; why, with the quick runs that chose it, in `test/bench/suites.go`); its replica rows stay the noisiest.\n")
	p("- **Hit rate** is token-weighted, from the simulators' own counters (`vllm:prefix_cache_hits_total` ÷ `vllm:prefix_cache_queries_total` over the run). The **pooled oracle** replays the same request stream, one request at a time, into one simulated cache with the capacity of the whole fleet (same block model): the best any placement could do. *%% of oracle* is the ratio of the two.\n")
	p("- **Strategies:** RANDOM, LEAST_OUTSTANDING_REQUESTS, PREFIX_AWARE, and SAGEMAKER_BASELINE — one hash of the first `prefixLength` characters placed by rendezvous hashing, overflow to the least-loaded instance above `concurrencyThreshold` (what Amazon describes) — run through the same binary with `--strategy-override`.\n\n")

	p("| workload | what | requests | conversations | prompt tokens | arrivals span | time scale |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, w := range r.workloadNames() {
		f := r.Workload[w]
		p("| %s | %s | %d | %d | %.1f M | %.0f s | %g |\n", w, f.Description, f.Requests, f.Sessions, float64(f.PromptTokens)/1e6, f.Duration.Seconds(), f.TimeScale)
	}

	p("\n## Targets\n\nA hit rate against the pooled oracle is the median of every run of PREFIX_AWARE through one router (the strategy table's and the replica section's one-replica runs, the same configuration), as the replica targets compare medians: one run's hit rate on Mooncake depends on which long prompts happen to be evicted between two uses of their key.\n\n| target | workload | measured | required | verdict |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets() {
		v := "met"
		if !t.Met {
			v = "**missed** (" + t.Gap + ")"
		}
		p("| %s | %s | %s | %s | %s |\n", t.Name, t.Workload, t.Measured, t.Required, v)
	}

	p("\n## Results by workload\n\n")
	p("Hit rate and oracle share from the simulators' counters. TTFT in simulated seconds: *engine* is what the simulators report (queueing + prefill; the targets use it), *client* is measured by the load generator through the router and includes the host's scheduling delays multiplied by 1/time scale. Throughput in completed requests per simulated second; share = busiest instance's requests ÷ average; spills = requests the router did not send to their preferred instance, with the router's reasons (*concurrency threshold*: the preferred instance had `concurrencyThreshold` in flight and the request walked its preference order; *all busy*: no instance was under both the threshold and the bounded-load cap, so the least loaded took it; *token load*: the preferred instance's token load (unprefilled prompt tokens, plus a fixed amount per request in flight) was over twice the candidates' average, and the request's cost on another instance along its order (that instance's token load plus the request's own prefill there, the cache it would lose counted again) was under half its cost on the preferred one).\n\n")
	p("![hit rate](%s)\n\n![ttft p50](%s)\n\n![ttft p90](%s)\n\n", PlotHitRate, PlotTTFTP50, PlotTTFTP90)
	for _, w := range r.workloadNames() {
		o := r.Oracles[w]
		p("### %s\n\n", w)
		p("| strategy | hit rate | %% of oracle | TTFT p50 | p90 | p99 | client p50 | client p90 | throughput | share max/avg | spills | failures |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range c.Strategies {
			x, ok := r.run(w, s)
			if !ok {
				continue
			}
			t, e := x.Summary.TTFT, x.Summary.EngineTTFT
			p("| %s | %.1f %% | %.0f %% | %s | %s | %s | %s | %s | %.2f/s | %.3f | %s | %d |\n",
				s, 100*x.HitRate, 100*ratio(x.HitRate, o.HitRate), secs(e.P50), secs(e.P90), secs(e.P99), secs(t.P50), secs(t.P90),
				x.Summary.Throughput, x.Summary.ShareMaxAvg, spills(x), x.Summary.Failures)
		}
		p("| pooled oracle | %.1f %% | 100 %% | | | | | | | | | |\n\n", 100*o.HitRate)
	}
	p("![share](%s)\n\n", PlotShare)
	for _, w := range r.workloadNames() {
		p("![share per instance, %s](%s)\n", w, PlotInstanceShare(w))
	}

	r.baselineMarkdown(&b)
	r.replicaMarkdown(&b)
	r.scaleEventsMarkdown(&b)
	r.fromZeroMarkdown(&b)
	r.eppMarkdown(&b)
	if r.Flow != nil {
		p("\n%s", r.Flow.Markdown())
	}

	p("\n## Remap on scale\n\n")
	p("Keys placed by the PREFIX_AWARE policy (`sidecar/router/policy`, fresh state each time, decisions released at once so that no overload guard interferes) over %d instances, then over %d (one added) and %d (the middle one removed). *Least possible*: 1/%d of the keys must move to a new instance; on removal, the keys the removed instance held. The synthetic set is distinct 1 KiB prefixes, placed with the router's default tuning and again as pure rendezvous hashing (share balancing off), which shows how much of the movement the balancing adds; a workload's set is its requests in arrival order, whose placement also depends on prefix popularity, the prefix index and share balancing: *cold* compares two fresh policies (a picker that starts with no state handed over: a router alone, or the first leader), *warm* replays the stream once over %d instances, changes the fleet, replays it again and compares with the same replay without the change (what a running router does when the fleet scales), and *restarted* does the same as warm in a fresh policy that first restores the snapshot of one that replayed the stream (what a new picker does: the one it replaces hands over its state).\n\n",
		c.Instances, c.Instances+1, c.Instances-1, c.Instances+1, c.Instances)
	p("| keys | count | change | moved | least possible | moved between survivors |\n|---|---:|---|---:|---:|---:|\n")
	for _, m := range r.Remap {
		p("| %s | %d | %d→%d | %.2f %% | %.2f %% | %.2f %% |\n", m.Keys, m.Count, m.From, m.To, 100*m.Moved, 100*m.Ideal, 100*m.BetweenSurvivors)
	}
	p("\n![remap](%s)\n", PlotRemap)

	p("\n## Router costs\n\n")
	p("**Routing decision** (in process: extract the routing text from the JSON body, then pick an instance with PREFIX_AWARE over %d instances; bodies share half their text, the rest is distinct; %d samples per size after warm-up):\n\n", c.Instances, c.DecisionSamples)
	p("| body | extract + decide p50 | p99 | decide only p50 | p99 |\n|---:|---:|---:|---:|---:|\n")
	for _, d := range r.Decision {
		body := fmt.Sprintf("%d KiB", d.BodyBytes>>10)
		if d.Text != "" {
			body += ", " + d.Text + fmt.Sprintf(" (%d samples)", d.Samples)
		}
		p("| %s | %s | %s | %s | %s |\n", body, micros(d.P50), micros(d.P99), micros(d.PickP50), micros(d.PickP99))
	}
	pr := r.Proxy
	p("\n**Added proxy latency** (%d B non-streaming chat requests, one at a time, alternately straight to one simulator answering in microseconds and through the router binary in front of it (and, with a baseline, to its own simulator and through the baseline's router, in the same turn), on loopback; %d samples each):\n\n", pr.BodyBytes, pr.Samples)
	p("| path | p50 | p99 |\n|---|---:|---:|\n| direct | %s | %s |\n| through the router | %s | %s |\n| **added by the router** | **%s** | %s |\n",
		micros(pr.DirectP50), micros(pr.DirectP99), micros(pr.RoutedP50), micros(pr.RoutedP99), micros(pr.AddedP50), micros(pr.AddedP99))
	p("\nAmazon reports 1.3–1.9 ms of routing overhead per request for its prefix-aware router.\n")
	p("%s", fleetSection(r.Fleet))
	p("%s", uploadsSection(r.Uploads))
	return b.String()
}

// uploadsSection reports the router's memory under a burst of large uploads.
func uploadsSection(u UploadMemory) string {
	if u.Uploads == 0 {
		return ""
	}
	mib := func(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
	return fmt.Sprintf("\n**Memory under large uploads** (%d concurrent uploads of %s each through the router binary with `--max-buffered-bytes` %s, small chat requests sent meanwhile, one at a time):\n\n"+
		"| buffer budget | router peak RSS | RSS above the budget | uploads forwarded / refused (503) / cut | small requests answered / failed | small p99 |\n|---:|---:|---:|---:|---:|---:|\n"+
		"| %s | %s | %s | %d / %d / %d | %d / %d | %s |\n",
		u.Uploads, mib(int64(u.UploadBytes)), mib(u.Budget), mib(u.Budget), mib(u.PeakRSS), mib(u.PeakRSS-u.Budget),
		u.Forwarded, u.Refused, u.Failed, u.SmallOK, u.SmallFailed, u.SmallP99.Round(time.Millisecond))
}

// Write renders the report to dir/benchmarks.md and its plots to dir/img.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "img"), 0o755); err != nil {
		return err
	}
	if err := r.WritePlots(dir); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(r.Markdown()), 0o644)
}
