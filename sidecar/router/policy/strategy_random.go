package policy

import (
	"math/rand/v2"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Random sends each request to a uniformly random healthy instance.
const Random = routing.StrategyRandom

func init() { register(Random, random{}, false) }

type random struct{}

func (random) decide(p *Policy, t *table, _ Key, allowed []int, c *Choice) {
	c.order = p.healthy(t, allowed)
	rand.Shuffle(len(c.order), func(i, j int) { c.order[i], c.order[j] = c.order[j], c.order[i] })
}
