package policy

import routing "github.com/warmroute/warmroute/api/routing/v1alpha1"

// LeastOutstandingRequests sends each request to the healthy instance with
// the fewest requests in flight from all router replicas together.
const LeastOutstandingRequests = routing.StrategyLeastOutstandingRequests

type leastOutstanding struct{}

func (leastOutstanding) decide(p *Policy, t *table, _ Key, allowed []int) decision {
	return decision{order: p.leastLoadedOrder(t, p.healthy(t, allowed)), placed: -1}
}
