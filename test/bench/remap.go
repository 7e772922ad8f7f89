package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/warmroute/warmroute/sidecar/router/extract"
	"github.com/warmroute/warmroute/sidecar/router/policy"
	"github.com/warmroute/warmroute/test/workload"
)

// Remap is how many keys change instance when the fleet changes size.
type Remap struct {
	// Keys names what was placed: "distinct prefixes" or a workload's
	// requests.
	Keys     string
	Count    int
	From, To int
	// Moved is the fraction of keys whose instance changed; Ideal the
	// least possible (1/To when adding, the removed instance's share when
	// removing); BetweenSurvivors the fraction that moved from one
	// surviving instance to another, which consistent placement avoids.
	Moved, Ideal, BetweenSurvivors float64
}

// routingKeys turns request bodies into what the policy sees, as the router
// extracts them.
type routingKeys struct {
	reqs []policy.Request
}

func (c *Config) keysOf(bodies func(yield func([]byte) bool)) (routingKeys, error) {
	lim := extract.Limits{Window: c.PrefixLength, Lookahead: policy.DefaultTuning().LookaheadChars}
	var k routingKeys
	for b := range bodies {
		r, err := extract.OpenAI(extract.Chat, b, "", lim)
		if err != nil {
			return k, err
		}
		k.reqs = append(k.reqs, policy.Request{Model: r.Model, Tenant: r.Tenant, Text: r.Text, WindowBytes: r.WindowBytes})
	}
	return k, nil
}

// place routes every key with a fresh PREFIX_AWARE policy over instances
// (ids), in order, each decision released before the next, and returns the
// chosen instance ids.
func (c *Config) place(keys routingKeys, ids []string) []string {
	p := c.newPolicy(ids)
	out := make([]string, len(keys.reqs))
	for i, r := range keys.reqs {
		ch, err := p.Pick(r)
		if err != nil {
			panic(err)
		}
		out[i] = ch.Instance().ID
		ch.Done()
	}
	return out
}

// newPolicy is a fresh PREFIX_AWARE policy with the router's default
// tuning over the instances ids, configured as the routing document says.
func (c *Config) newPolicy(ids []string) *policy.Policy {
	p := policy.New(policy.DefaultTuning())
	cfg := policy.Config{
		Strategy: policy.PrefixAware, Model: c.Model, HashSeed: c.Seed,
		PrefixLength: c.PrefixLength, ConcurrencyThreshold: c.ConcurrencyThreshold,
	}
	for _, id := range ids {
		cfg.Instances = append(cfg.Instances, policy.Instance{ID: id, Address: "127.0.0.1:1"})
	}
	if err := p.Update(cfg); err != nil {
		panic(err) // a fixed, valid configuration
	}
	return p
}

// remaps measures N→N+1 and N→N−1 (removing a middle instance) for keys.
func (c *Config) remaps(name string, keys routingKeys) []Remap {
	n := c.Instances
	ids := make([]string, n+1)
	for i := range ids {
		ids[i] = instanceID(i)
	}
	base := c.place(keys, ids[:n])
	up := c.place(keys, ids)
	removed := ids[n/2]
	down := c.place(keys, slices.Delete(slices.Clone(ids[:n]), n/2, n/2+1))

	grow := Remap{Keys: name, Count: len(base), From: n, To: n + 1, Ideal: 1 / float64(n+1)}
	shrink := Remap{Keys: name, Count: len(base), From: n, To: n - 1}
	for i := range base {
		if up[i] != base[i] {
			grow.Moved++
			if up[i] != ids[n] {
				grow.BetweenSurvivors++
			}
		}
		if base[i] == removed {
			shrink.Ideal++
		}
		if down[i] != base[i] {
			shrink.Moved++
			if base[i] != removed {
				shrink.BetweenSurvivors++
			}
		}
	}
	out := []Remap{grow, shrink}
	for i := range out {
		k := float64(max(1, len(base)))
		out[i].Moved /= k
		out[i].BetweenSurvivors /= k
		if out[i].To < n {
			out[i].Ideal /= k
		}
	}
	return out
}

// measureRemap places distinct synthetic prefixes: the policy's placement
// alone, without the popularity effects of a workload.
func (c *Config) measureRemap() []Remap {
	keys, err := c.keysOf(func(yield func([]byte) bool) {
		for i := range c.RemapGroups {
			rng := rand.New(rand.NewPCG(c.Seed, uint64(i)))
			b, _ := workload.Body(workload.Request{Messages: []workload.Message{
				{Role: "user", Content: randomText(rng, 1024)},
			}}, workload.Options{Model: c.Model})
			if !yield(b) {
				return
			}
		}
	})
	if err != nil {
		panic(fmt.Sprintf("synthetic keys: %v", err))
	}
	return c.remaps(fmt.Sprintf("%d distinct prefixes", c.RemapGroups), keys)
}

// workloadRemap places a workload's requests in arrival order.
func (c *Config) workloadRemap(w workload.Workload) ([]Remap, error) {
	keys, err := c.keysOf(func(yield func([]byte) bool) {
		for _, r := range w.Requests {
			b, err := workload.Body(r, workload.Options{Model: c.Model})
			if err != nil || !yield(b) {
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return c.remaps(w.Name+" requests", keys), nil
}

// randomText is n bytes of lower-case letters and spaces.
func randomText(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		if rng.IntN(6) == 0 {
			b[i] = ' '
		} else {
			b[i] = byte('a' + rng.IntN(26))
		}
	}
	return string(b)
}
