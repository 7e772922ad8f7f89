package policy

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"slices"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Strategy names a routing strategy: the routing document's own type, so
// the document, the CRD enum and the policy share one vocabulary.
type Strategy = routing.Strategy

// strategy is one routing strategy: it chooses among the allowed
// instances for key and changes nothing (it may reuse the policy's
// buffers); Pick then records the decision.
type strategy func(p *Policy, v *view, key Key, allowed []int) decision

// decision is what a strategy decided.
type decision struct {
	order    []int // the instance to use first, then the fallback order
	unranked unrankedTail
	placed   int       // the member the strategy chose before the guard
	hit      float64   // the part of the prompt order[0] is expected to hold
	warm     *warmPlan // nil: none
	learning
	Decision
}

// strategies are the routing document's; benchmarkStrategies the
// comparison points a benchmark build adds, which only a policy whose
// Tuning sets BenchmarkStrategies accepts.
var (
	strategies          = map[Strategy]strategy{Random: random, LeastOutstandingRequests: leastOutstanding, PrefixAware: prefixAware}
	benchmarkStrategies = map[Strategy]strategy{}
)

// Strategies lists the routing document's strategies in its order, then
// the benchmark ones when withBenchmark is set.
func Strategies(withBenchmark bool) []Strategy {
	out := slices.Clone(routing.Strategies)
	if withBenchmark {
		out = append(out, slices.Sorted(maps.Keys(benchmarkStrategies))...)
	}
	return out
}

// ValidStrategy returns an error naming the choices unless s is a
// strategy (benchmark strategies count only when withBenchmark is set).
func ValidStrategy(s Strategy, withBenchmark bool) error {
	if _, ok := strategies[s]; ok {
		return nil
	}
	if _, ok := benchmarkStrategies[s]; ok && withBenchmark {
		return nil
	}
	return routing.ErrUnknownStrategy(s, Strategies(withBenchmark))
}

// lookup returns the implementation of s under the policy's tuning.
func (p *Policy) lookup(s Strategy) (strategy, error) {
	if err := ValidStrategy(s, p.tuning.BenchmarkStrategies); err != nil {
		return nil, err
	}
	if impl := strategies[s]; impl != nil {
		return impl, nil
	}
	return benchmarkStrategies[s], nil
}

// Random sends each request to a uniformly random healthy instance.
const Random = routing.StrategyRandom

func random(_ *Policy, v *view, _ Key, allowed []int) decision {
	order := v.healthy(allowed)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return decision{order: order, placed: order[0]}
}

// LeastOutstandingRequests sends each request to the healthy instance with
// the fewest requests in flight from all router replicas together.
const LeastOutstandingRequests = routing.StrategyLeastOutstandingRequests

// leastOutstanding shuffles first (random) so that the stable sort breaks
// ties randomly.
func leastOutstanding(p *Policy, v *view, key Key, allowed []int) decision {
	order := random(p, v, key, allowed).order
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(v.inFlight(a), v.inFlight(b)) })
	return decision{order: order, placed: order[0]}
}
