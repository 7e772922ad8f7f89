package bench

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/warmroute/warmroute/test/gobuild"
)

// FleetScale is what one picker's decision costs as the fleet grows
// (BenchmarkDecisionFleet) and the rate it serves at 256 instances through
// the pick API (BenchmarkPickAPIFleet256).
type FleetScale struct {
	Rounds    int
	Decisions []FleetDecision
	Load      []PickerLoad
}

// FleetDecision is BenchmarkDecisionFleet at one fleet size, medians of
// the rounds.
type FleetDecision struct {
	Instances                      int
	NsPerOp, P50us, P99us, BytesOp float64
}

// PerCore is how many decisions one core makes a second, from the mean
// time a decision takes.
func (d FleetDecision) PerCore() float64 { return ratio(1e9, d.NsPerOp) }

// PickerLoad is one offered rate of BenchmarkPickAPIFleet256.
type PickerLoad struct {
	Offered                      string
	Rate, P50us, P99us, Fallback float64
}

// fleetSizes are BenchmarkDecisionFleet's sub-benchmarks, in its order.
var fleetSizes = []int{8, 64, 256, 1024}

// fleetRounds: each size's p99 is the 30th slowest of 3,000 decisions, which
// a scheduling hiccup on the shared machine moves; the median of 3 rounds
// keeps one hiccup out of the table.
const fleetRounds = 3

var offeredName = regexp.MustCompile(`^BenchmarkPickAPIFleet256/offered=(\S+)$`)

// measureFleetScale runs both benchmarks in this tree.
func (c *Config) measureFleetScale(ctx context.Context) (*FleetScale, error) {
	root, err := gobuild.ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	fs := &FleetScale{Rounds: fleetRounds}
	samples := map[int]map[string][]float64{}
	for range fleetRounds {
		res, err := goBench(ctx, root, "./sidecar/router/proxy", "^BenchmarkDecisionFleet$", "3000x")
		if err != nil {
			return nil, err
		}
		for _, n := range fleetSizes {
			figures, ok := res[fmt.Sprintf("BenchmarkDecisionFleet/instances=%d", n)]
			if !ok {
				return nil, fmt.Errorf("BenchmarkDecisionFleet printed no line for %d instances", n)
			}
			if samples[n] == nil {
				samples[n] = map[string][]float64{}
			}
			for unit, v := range figures {
				samples[n][unit] = append(samples[n][unit], v)
			}
		}
	}
	for _, n := range fleetSizes {
		s := samples[n]
		fs.Decisions = append(fs.Decisions, FleetDecision{Instances: n,
			NsPerOp: median(s["ns/op"]), P50us: median(s["p50-µs"]), P99us: median(s["p99-µs"]), BytesOp: median(s["B/op"])})
	}
	// 2 s per offered rate: the lowest, 500 picks/s, then makes 1,000
	// picks, so every rate's p99 rests on at least its 10 slowest.
	res, err := goBench(ctx, root, "./sidecar/router/picker", "^BenchmarkPickAPIFleet256$", "2s")
	if err != nil {
		return nil, err
	}
	for name, f := range res {
		if m := offeredName.FindStringSubmatch(name); m != nil {
			fs.Load = append(fs.Load, PickerLoad{Offered: m[1], Rate: f["picks/s"], P50us: f["p50-µs"], P99us: f["p99-µs"], Fallback: f["fallback-frac"]})
		}
	}
	// Offered rates in ascending order, unpaced last.
	offered := func(l PickerLoad) float64 {
		v, err := strconv.ParseFloat(l.Offered, 64)
		if err != nil {
			return 1e18
		}
		return v
	}
	slices.SortFunc(fs.Load, func(a, b PickerLoad) int { return cmp.Compare(offered(a), offered(b)) })
	return fs, nil
}

// fleetSection reports FleetScale.
func fleetSection(fs *FleetScale) string {
	if fs == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("\n**Decision by fleet size** (`BenchmarkDecisionFleet` in `sidecar/router/proxy`: extract + PREFIX_AWARE decide for 64 KiB chat bodies, one picker deciding for the whole fleet; 3,000 decisions a round, medians of %d rounds; *per core* = 1 s ÷ the mean decision):\n\n", fs.Rounds)
	p("| instances | p50 | p99 | B/op | decisions/s per core |\n|---:|---:|---:|---:|---:|\n")
	for _, d := range fs.Decisions {
		p("| %d | %.1f µs | %.1f µs | %.0f | %.0f |\n", d.Instances, d.P50us, d.P99us, d.BytesOp, d.PerCore())
	}
	if len(fs.Load) == 0 {
		return b.String()
	}
	p("\n**The picker alone under load** (`BenchmarkPickAPIFleet256` in `sidecar/router/picker`: a picker for 256 instances serving the signed pick API on loopback, 4 router replicas with 4 callers each calling pick then done, at stepped offered rates; callers and picker share the 2 cores):\n\n")
	p("| offered picks/s | served picks/s | pick p50 | pick p99 | within 1 ms p99 |\n|---:|---:|---:|---:|---|\n")
	best := 0.0
	for _, l := range fs.Load {
		ok := l.P99us <= 1000
		if ok {
			best = max(best, l.Rate)
		}
		p("| %s | %.0f | %.0f µs | %.0f µs | %s |\n", l.Offered, l.Rate, l.P50us, l.P99us, map[bool]string{true: "yes", false: "no"}[ok])
	}
	p("\nHighest rate served with pick p99 ≤ 1 ms: %.0f picks/s.\n", best)
	return b.String()
}
