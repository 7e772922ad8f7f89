package bench

import (
	"fmt"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// summaryMarkdown opens the report: one row per workload, each strategy's
// hit rate and engine TTFT p90, and PREFIX_AWARE against the
// SageMaker-style baseline, so that a reader sees the verdict before the
// detail. Every figure is one of the per-workload tables'.
func (r *Report) summaryMarkdown(b *strings.Builder) {
	var strategies []policy.Strategy
	for _, s := range r.Config.Strategies {
		for _, x := range r.Runs {
			if x.Strategy == s {
				strategies = append(strategies, s)
				break
			}
		}
	}
	if len(strategies) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Summary\n\n")
	p("Each cell is a strategy's prefix-cache hit rate · engine TTFT p90 on one workload, from *Results by workload* below; the last columns are PREFIX_AWARE against the SageMaker-style baseline (hit rate in points, p90 in per cent) and the pooled oracle's hit rate, the most any placement could reach.\n\n")
	row := func(cells []string) { p("| %s |\n", strings.Join(cells, " | ")) }
	head := []string{"workload"}
	for _, s := range strategies {
		head = append(head, string(s))
	}
	row(append(head, "PREFIX_AWARE vs baseline", "pooled oracle"))
	p("|---|%s\n", strings.Repeat("---:|", len(strategies)+2))
	for _, w := range r.workloadNames() {
		cells := []string{w}
		for _, s := range strategies {
			x, ok := r.run(w, s)
			cells = append(cells, "")
			if ok {
				cells[len(cells)-1] = fmt.Sprintf("%.1f %% · %s", 100*x.HitRate, secs(x.Summary.EngineTTFT.P90))
			}
		}
		cells = append(cells, versusBaseline(r, w), "")
		if o, ok := r.Oracles[w]; ok {
			cells[len(cells)-1] = fmt.Sprintf("%.1f %%", 100*o.HitRate)
		}
		row(cells)
	}
	targets := r.Targets()
	missed := 0
	for _, t := range targets {
		if !t.Met {
			missed++
		}
	}
	p("\n%d of %d targets met; the %d missed are marked in *Targets*.\n\n", len(targets)-missed, len(targets), missed)
}

// versusBaseline is PREFIX_AWARE's hit rate and p90 against the baseline's
// on workload w, empty when either did not run.
func versusBaseline(r *Report, w string) string {
	pa, ok := r.run(w, policy.PrefixAware)
	base, ok2 := r.run(w, Baseline)
	if !ok || !ok2 {
		return ""
	}
	return fmt.Sprintf("%+.1f points, p90 %+.0f %%", 100*(pa.HitRate-base.HitRate),
		100*(ratio(pa.Summary.EngineTTFT.P90, base.Summary.EngineTTFT.P90)-1))
}
