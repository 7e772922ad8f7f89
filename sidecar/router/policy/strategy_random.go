package policy

import (
	"math/rand/v2"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Random sends each request to a uniformly random healthy instance.
const Random = routing.StrategyRandom

type random struct{}

func (random) decide(_ *Policy, v *view, _ Key, allowed []int) decision {
	order := v.healthy(allowed)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return decision{order: order, placed: order[0]}
}
