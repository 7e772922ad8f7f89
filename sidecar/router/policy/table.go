package policy

import (
	"errors"
	"slices"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Errors the transport turns into HTTP statuses.
var (
	ErrUnknownModel = errors.New("model is neither the served model nor a known adapter")
	ErrNoInstance   = errors.New("no instance can serve this model")
)

// Instance is one backend as the policy sees it.
type Instance struct {
	ID      string
	Address string
	Weight  int // 0 means 1
	// Draining says the instance is leaving: it takes no new keys, and
	// serves only the keys it holds while their next owners are warmed.
	Draining bool
}

// Config is the part of the routing document the policy needs.
type Config struct {
	Strategy             routing.Strategy
	Model                string
	HashSeed             uint64
	PrefixLength         int // characters (OpenAI) or bytes (/invocations)
	ConcurrencyThreshold int
	Instances            []Instance
	// Adapters maps an adapter name to the IDs of the instances where it is
	// loaded; its requests go only there.
	Adapters map[string][]string
}

// member is an instance in a table.
type member struct {
	Instance
	IDHash uint64 // its ID's hash under the hash seed, for rendezvous
	Weight float64
	Stat   *counters
}

// table is a configuration as decisions read it.
type table struct {
	Cfg      Config
	Members  []member
	Adapters map[string][]int // the members an adapter's requests may use
	// All are the members that take new keys: every one not draining
	// (every one when all are, rather than refuse traffic while a whole
	// fleet leaves); Draining are the others.
	All, Draining []int
	Index         map[string]int // member position by ID
	BlockSize     int
	Uniform       bool // every member has the same weight (see rankTop)
	strategy      strategy
}

// newTable builds the table of cfg on the registry's counters, and returns
// the counters it created.
func newTable(cfg Config, r *registry) (*table, []*counters) {
	t := &table{Cfg: cfg, Adapters: make(map[string][]int, len(cfg.Adapters)), Index: make(map[string]int, len(cfg.Instances))}
	var joined []*counters
	for i, in := range cfg.Instances {
		s, fresh := r.Lookup(in.ID)
		if fresh {
			joined = append(joined, s)
		}
		t.Members = append(t.Members, member{Instance: in, IDHash: hashString(cfg.HashSeed, in.ID), Weight: float64(max(in.Weight, 1)), Stat: s})
		t.Index[in.ID] = i
	}
	all := make([]int, len(t.Members))
	for i := range all {
		all[i] = i
	}
	t.All, t.Draining = t.serving(all)
	t.Uniform = !slices.ContainsFunc(t.Members, func(m member) bool { return m.Weight != t.Members[0].Weight })
	for name, ids := range cfg.Adapters {
		set := make([]int, 0, len(ids))
		for _, id := range ids {
			if i, ok := t.Index[id]; ok {
				set = append(set, i)
			}
		}
		slices.Sort(set)
		t.Adapters[name], _ = t.serving(slices.Compact(set))
	}
	// About 32 blocks a window: fine enough that two prompts sharing most
	// of a window share most of its blocks (a block is at most 3 % of
	// it), few enough to hash and look up in a few microseconds. At least
	// 64 bytes, about 16 tokens: vLLM's KV block, the least it caches, so
	// a finer block would tell apart prefixes its cache does not.
	t.BlockSize = max(64, cfg.PrefixLength/32)
	return t, joined
}

// serving splits set into the members not draining and the draining
// ones; all of set serves when every member of it drains.
func (t *table) serving(set []int) (serving, draining []int) {
	for _, m := range set {
		if t.Members[m].Draining {
			draining = append(draining, m)
		} else {
			serving = append(serving, m)
		}
	}
	if len(serving) == 0 {
		return set, nil
	}
	return serving, draining
}

// Candidates resolves the model to the members allowed to serve it.
func (t *table) Candidates(model string) ([]int, error) {
	if model == "" || model == t.Cfg.Model {
		if len(t.All) == 0 {
			return nil, ErrNoInstance
		}
		return t.All, nil
	}
	set, ok := t.Adapters[model]
	if !ok {
		return nil, ErrUnknownModel
	}
	if len(set) == 0 {
		return nil, ErrNoInstance
	}
	return set, nil
}
