package policy

// Baseline is the comparison point for benchmarks, not a value of the
// routing document: one hash of the first prefixLength, consistent (HRW)
// placement, overflow to the least loaded instance when over the threshold.
// It is what a router without block matching or a load-aware walk would do.
// Only a policy whose Tuning sets BenchmarkStrategies accepts it.
const Baseline Strategy = "SAGEMAKER_BASELINE"

func init() { register(Baseline, baseline{}, true) }

type baseline struct{}

// decide hashes the whole window once, places it by HRW, and overflows to
// the least loaded instance anywhere.
func (baseline) decide(p *Policy, t *table, req Request, allowed []int, c *Choice, _ bool) {
	seed := scopeSeed(t.cfg.HashSeed, req.Model, req.Tenant)
	key := seed
	if w := min(req.WindowBytes, len(req.Text)); w > 0 {
		var buf [1]uint64
		key = blockChain(buf[:0], seed, req.Text[:w], w)[0]
	}
	order := rank(t, allowed, key, nil)
	c.order = order
	first := order[0]
	if p.available(t, first) && !p.overThreshold(t, first) {
		return
	}
	best := p.leastLoaded(t, order)
	if best == 0 {
		return
	}
	order[0], order[best] = order[best], order[0]
	c.Spill = SpillAllBusy
	if !p.available(t, first) {
		c.Spill = SpillUnhealthy
	}
}
