package bench

import (
	"strings"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/workload"
)

func summaryRun(w string, s policy.Strategy, hit, p90 float64) RunResult {
	return RunResult{Workload: w, Strategy: s, HitRate: hit,
		Summary: workload.Summary{EngineTTFT: workload.Percentiles{P90: p90}}}
}

// TestSummaryTable: the report opens with one row per workload holding
// each strategy that ran (hit rate · engine p90), PREFIX_AWARE against the
// baseline and the oracle, before any other section; a strategy with no
// run gets no column, a workload without the baseline an empty comparison.
func TestSummaryTable(t *testing.T) {
	r := &Report{
		Config: Config{
			Strategies: []policy.Strategy{policy.Random, policy.LeastOutstandingRequests, Baseline, policy.PrefixAware},
			Workloads:  []WorkloadSpec{{Name: workload.NameLongContext}, {Name: workload.NameRAG}},
		},
		Runs: []RunResult{
			summaryRun(workload.NameLongContext, policy.Random, 0.236, 0.728),
			summaryRun(workload.NameLongContext, Baseline, 0.896, 0.356),
			summaryRun(workload.NameLongContext, policy.PrefixAware, 0.871, 0.360),
			summaryRun(workload.NameRAG, policy.Random, 0.666, 0.231),
			summaryRun(workload.NameRAG, policy.PrefixAware, 0.828, 0.186),
		},
		Oracles: map[string]Oracle{workload.NameLongContext: {HitRate: 0.909}, workload.NameRAG: {HitRate: 0.860}},
	}
	md := r.Markdown()
	for _, want := range []string{
		"| workload | RANDOM | SAGEMAKER_BASELINE | PREFIX_AWARE | PREFIX_AWARE vs baseline | pooled oracle |\n|---|---:|---:|---:|---:|---:|\n",
		"| long-context | 23.6 % · 728 ms | 89.6 % · 356 ms | 87.1 % · 360 ms | -2.5 points, p90 +1 % | 90.9 % |\n",
		"| rag | 66.6 % · 231 ms |  | 82.8 % · 186 ms |  | 86.0 % |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the summary lacks %q:\n%s", want, md)
		}
	}
	if s, setup := strings.Index(md, "## Summary"), strings.Index(md, "## Setup"); s < 0 || s > setup {
		t.Errorf("the summary is not the report's first section (at %d, Setup at %d)", s, setup)
	}
}
