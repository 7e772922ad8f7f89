package policy

import routing "github.com/warmroute/warmroute/api/routing/v1alpha1"

// LeastOutstandingRequests sends each request to the healthy instance with
// the fewest requests in flight from all router replicas together.
const LeastOutstandingRequests = routing.StrategyLeastOutstandingRequests

type leastOutstanding struct{}

func (leastOutstanding) decide(_ *Policy, v *view, _ Key, allowed []int) decision {
	order := v.leastLoadedOrder(v.healthy(allowed))
	return decision{order: order, placed: order[0]}
}
