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
	lim := extract.Limits{Window: c.PrefixLength, Lookahead: policy.New(policy.Tuning{SketchWidth: 1}).LookaheadBytes()}
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

// history is what a policy knows before it routes the keys that are
// compared: nothing (cold), the keys routed once over some instances
// (warm), or the same history carried over in a snapshot into a fresh
// policy (restarted: what a new picker does when the old one hands over
// its state, see sidecar/router/picker).
type history struct {
	over     []string
	restored bool
}

// place routes every key with a PREFIX_AWARE policy over the instances ids,
// in order, each decision released before the next, and returns the chosen
// instance ids. With a history, the policy (or, restored, the one whose
// snapshot a fresh policy restores) first routes the keys over h.over and
// is then reconfigured to ids, as a running router is when the fleet
// changes: what its prefix index remembers counts.
func (c *Config) place(keys routingKeys, h history, ids []string, t policy.Tuning) []string {
	route := func(p *policy.Policy, ids []string) []string {
		if err := p.Update(c.policyConfig(ids)); err != nil {
			panic(err) // a fixed, valid configuration
		}
		out := make([]string, len(keys.reqs))
		for i, r := range keys.reqs {
			ch, err := p.Pick(p.Key(r))
			if err != nil {
				panic(err)
			}
			out[i] = ch.Instance().ID
			ch.Done()
		}
		return out
	}
	p := policy.New(t)
	if h.over != nil {
		route(p, h.over)
		if h.restored {
			snap := p.Snapshot()
			p = policy.New(t)
			if err := p.Update(c.policyConfig(ids)); err != nil {
				panic(err)
			}
			if err := p.Restore(snap); err != nil {
				panic(fmt.Sprintf("restore a snapshot of %d bytes: %v", len(snap), err))
			}
		}
	}
	return route(p, ids)
}

// policyConfig is what the routing document gives the policy.
func (c *Config) policyConfig(ids []string) policy.Config {
	cfg := policy.Config{
		Strategy: policy.PrefixAware, Model: c.Model, HashSeed: c.Seed,
		PrefixLength: c.PrefixLength, ConcurrencyThreshold: c.ConcurrencyThreshold,
	}
	for _, id := range ids {
		cfg.Instances = append(cfg.Instances, policy.Instance{ID: id, Address: "127.0.0.1:1"})
	}
	return cfg
}

// remaps measures N→N+1 and N→N−1 (removing a middle instance) for keys,
// with fresh policies (cold), with policies that routed the keys over N
// instances first (warm), or restored from the snapshot of one that did
// (restarted).
func (c *Config) remaps(name string, keys routingKeys, t policy.Tuning, kind remapKind) []Remap {
	n := c.Instances
	ids := make([]string, n+1)
	for i := range ids {
		ids[i] = instanceID(i)
	}
	var before history
	if kind != remapCold {
		before = history{over: ids[:n], restored: kind == remapRestarted}
	}
	base := c.place(keys, before, ids[:n], t)
	up := c.place(keys, before, ids, t)
	removed := ids[n/2]
	down := c.place(keys, before, slices.Delete(slices.Clone(ids[:n]), n/2, n/2+1), t)

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
// alone, without the popularity effects of a workload; first with the
// router's default tuning, then as pure rendezvous hashing.
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
	name := fmt.Sprintf("%d distinct prefixes", c.RemapGroups)
	out := c.remaps(name, keys, policy.DefaultTuning(), remapCold)
	// The same keys with share balancing off (Tuning.ShareSlack < 0):
	// pure rendezvous placement, for reference.
	pure := policy.DefaultTuning()
	pure.ShareSlack = -1
	return append(out, c.remaps(name+", pure HRW (no share balancing)", keys, pure, remapCold)...)
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
	var out []Remap
	for _, k := range []remapKind{remapCold, remapWarm, remapRestarted} {
		out = append(out, c.remaps(w.Name+" requests, "+string(k), keys, policy.DefaultTuning(), k)...)
	}
	return out, nil
}

// remapKind is what a policy knew before the fleet changed.
type remapKind string

const (
	// remapCold: nothing, a picker that started with no state handed over
	// (a router alone, or the first leader).
	remapCold remapKind = "cold"
	// remapWarm: the same stream routed once before, a running router.
	remapWarm remapKind = "warm"
	// remapRestarted: a new picker that took over the state of the one
	// before it, which had routed the stream once before.
	remapRestarted remapKind = "restarted"
)

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
