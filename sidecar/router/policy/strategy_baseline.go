//go:build benchstrategies

package policy

import "github.com/warmroute/warmroute/sidecar/router/fleet"

// Baseline is the comparison point for benchmarks, not a value of the
// routing document: one hash of the first prefixLength, consistent (HRW)
// placement, overflow to the least loaded instance when over the threshold.
// It is what a router without block matching or a load-aware walk would do.
// Only a router built with the benchstrategies tag (test/bench builds it so)
// has it, and only a policy whose Tuning sets BenchmarkStrategies accepts it.
const Baseline Strategy = "SAGEMAKER_BASELINE"

func init() { benchmarkStrategies[Baseline] = baseline{} }

type baseline struct{}

// decide places the hash of the whole window by HRW, and overflows to
// the least loaded instance anywhere.
func (baseline) decide(p *Policy, t *table, key Key, allowed []int) decision {
	order := fleet.Rank(t.Table, allowed, key.WindowHash(t.Cfg.HashSeed), nil)
	d := decision{order: order, placed: -1}
	first := order[0]
	if p.available(t, first) && !p.overThreshold(t, first) {
		return d
	}
	best := p.leastLoaded(t, order)
	if best == 0 {
		return d
	}
	order[0], order[best] = order[best], order[0]
	d.Spill = SpillAllBusy
	if !p.available(t, first) {
		d.Spill = SpillUnhealthy
	}
	return d
}
