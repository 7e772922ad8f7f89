//go:build benchstrategies

package policy

// Baseline is the benchmarks' comparison point, in builds with the
// benchstrategies tag only: HRW placement of one hash of the window,
// overflow to the least loaded instance over the threshold, what a router
// without block matching or a load-aware walk would do.
const Baseline Strategy = "SAGEMAKER_BASELINE"

func init() { benchmarkStrategies[Baseline] = baseline }

// baseline places the hash of the whole window by HRW, and overflows to
// the least loaded instance anywhere.
func baseline(_ *Policy, v *view, key Key, allowed []int) decision {
	order := rank(v.table, allowed, key.WindowHash(v.Cfg.HashSeed), nil)
	first := order[0]
	d := decision{order: order, placed: first}
	if v.available(first) && !v.full(first) {
		return d
	}
	best := v.leastLoaded(order)
	if best == 0 {
		return d
	}
	order[0], order[best] = order[best], order[0]
	d.Spill = SpillAllBusy
	if !v.available(first) {
		d.Spill = SpillUnhealthy
	}
	return d
}
