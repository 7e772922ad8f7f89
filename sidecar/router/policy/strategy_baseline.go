//go:build benchstrategies

package policy

// Baseline is the benchmarks' comparison point, in builds with the
// benchstrategies tag only: HRW placement of one hash of the window,
// overflow to the least loaded instance over the threshold, what a router
// without block matching or a load-aware walk would do.
const Baseline Strategy = "SAGEMAKER_BASELINE"

func init() { benchmarkStrategies[Baseline] = baseline{} }

type baseline struct{}

// decide places the hash of the whole window by HRW, and overflows to
// the least loaded instance anywhere.
func (baseline) decide(p *Policy, t *table, key Key, allowed []int) decision {
	order := rank(t, allowed, key.WindowHash(t.Cfg.HashSeed), nil)
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
