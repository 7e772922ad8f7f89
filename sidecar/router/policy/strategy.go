package policy

import (
	"cmp"
	"slices"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Strategy names a routing strategy: the routing document's own type, so
// the document, the CRD enum and the policy share one vocabulary.
type Strategy = routing.Strategy

// strategy is one routing strategy. decide chooses among the allowed
// instances for key and changes nothing (it may reuse the policy's
// buffers, see Policy.chain); Pick then records the decision (record).
type strategy interface {
	decide(p *Policy, t *table, key Key, allowed []int) decision
}

// decision is what a strategy decided.
type decision struct {
	// order is the instance to use first, then the fallback order, whose
	// last unranked.n members are not yet ranked.
	order    []int
	unranked unranked
	// placed is the member the strategy chose before the overload guard
	// (-1: order[0], for strategies without a guard).
	placed int
	// hit is the fraction of the prompt order[0] is expected to hold (0
	// for strategies that do not match prefixes).
	hit float64
	// warm is 1 + the member to send a warm copy, recorded at version
	// warmVer + 1 when it completes; 0: none (see warm.go).
	warm    int
	warmVer uint32
	// learning is what recording the decision teaches the policy.
	learning
	Decision
}

// registration is one entry of the strategy table.
type registration struct {
	impl strategy
	// benchmark marks a comparison point for benchmarks: usable only with
	// Tuning.BenchmarkStrategies (the router's --strategy-override), and not
	// a value of the routing document.
	benchmark bool
}

// strategies is the table of every strategy, filled by register from each
// strategy's own file.
var strategies = map[Strategy]registration{}

// register adds a strategy to the table; each strategy file calls it once
// from init.
func register(s Strategy, impl strategy, benchmark bool) {
	if _, dup := strategies[s]; dup {
		panic("policy: strategy " + string(s) + " registered twice")
	}
	strategies[s] = registration{impl: impl, benchmark: benchmark}
}

// Strategies lists the registered strategies, the routing document's first
// in its order; benchmark strategies only when withBenchmark is set.
func Strategies(withBenchmark bool) []Strategy {
	var out []Strategy
	for s, r := range strategies {
		if !r.benchmark || withBenchmark {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Strategy) int {
		return cmp.Or(cmp.Compare(docOrder(a), docOrder(b)), cmp.Compare(a, b))
	})
	return out
}

// docOrder is the position of s in the routing document's list (after it
// if absent).
func docOrder(s Strategy) int {
	if i := slices.Index(routing.Strategies, s); i >= 0 {
		return i
	}
	return len(routing.Strategies)
}

// ValidStrategy returns an error naming the choices unless s is registered
// (benchmark strategies count only when withBenchmark is set).
func ValidStrategy(s Strategy, withBenchmark bool) error {
	if r, ok := strategies[s]; ok && (!r.benchmark || withBenchmark) {
		return nil
	}
	return routing.ErrUnknownStrategy(s, Strategies(withBenchmark))
}

// lookup returns the implementation of s under the policy's tuning.
func (p *Policy) lookup(s Strategy) (strategy, error) {
	if err := ValidStrategy(s, p.tuning.BenchmarkStrategies); err != nil {
		return nil, err
	}
	return strategies[s].impl, nil
}
