package policy

import (
	"cmp"
	"math"
	"time"
)

// Tuning is what a router may set of the policy: IndexEntries (its
// memory), BytesPerToken (the tokenizer) and NoWarm; four of the constants
// below are fields too, for tests and the benchmark's reference rows (a
// negative ShareSlack: pure rendezvous placement). Zero values take
// DefaultTuning's.
type Tuning struct {
	// IndexEntries bounds the prefix index (~48 bytes each). The default,
	// 2^18 entries (12 MiB), remembers 2^18 ÷ (up to 16 recorded depths
	// per request) ≥ 16k recent requests' placements, several decay periods.
	IndexEntries int
	// BytesPerToken converts prompt text bytes into estimated tokens: 4
	// for English under BPE tokenizers, 1–2 for CJK.
	BytesPerToken float64

	ShareSlack  float64 // see defaultShareSlack
	ReplicaLoad float64 // see defaultReplicaLoad
	SketchWidth int     // see defaultSketchWidth
	DecayEvery  int64   // see defaultDecayEvery

	// NoWarm turns off warming (--warm=false): keys move cold.
	NoWarm bool
	// BenchmarkStrategies accepts the benchmark build's strategies
	// (--strategy-override).
	BenchmarkStrategies bool
	Now                 func() time.Time // for ejection deadlines
}

const (
	// lookaheadBytes is how far past the window the replica-set walk may
	// read when every window block is shared by most traffic, to find what
	// tells requests apart: 32 KiB, about 8k tokens, the system prompts of
	// templated bots and agents.
	lookaheadBytes = 32768
	// balanceFactor caps the requests in flight a threshold spill may go
	// to at 1.25 × the average: the bounded-load factor of HAProxy and
	// Envoy and of arXiv:1608.01350's example.
	balanceFactor = 1.25
	// defaultReplicaLoad is the part of one instance's fair share of
	// requests a single prefix may bring it before more instances serve it:
	// three quarters, leaving a quarter to the other keys whose first
	// choice they are.
	defaultReplicaLoad = 0.75
	// defaultShareSlack and moveSlack keep each instance's recent share of
	// requests within 1.10 × the average: a new key is placed only within
	// 1.05 ×, and a known key moves (a cold prefill) only off an instance
	// past 1.08 ×. The gap is hysteresis, so keys near the bound do not
	// move back and forth.
	defaultShareSlack = 1.05
	moveSlack         = 1.08
	// defaultSketchWidth is the popularity sketch's counters per row: it
	// over-estimates a fraction by about blocks per request ÷ width, 32 ÷
	// 65,536 ≈ 0.05 %, far below the fractions that decide replica sets.
	defaultSketchWidth = 1 << 16
	// defaultDecayEvery: popularity and share counts halve every 4,096
	// decisions, so they weigh about the last 8k requests: hundreds per
	// instance of a fleet of tens, and a change of traffic within minutes.
	defaultDecayEvery = 4096
	// decodeTokens is the load, in prefill-token equivalents, of a request
	// in flight: a batch slot step after step for its whole response, a
	// few hundred tokens of chat.
	decodeTokens = 256
	// tokenBalance: a cost counts as clearly more than another at twice
	// it. Leaving the instance that holds a prefix costs a cold prefill; a
	// lighter queue is worth that only when it is a whole load lighter.
	tokenBalance = 2
	// tokenFloor is the cost under which nothing counts as clearly more, so
	// that a lightly loaded fleet never spills on tokens: about one engine
	// step's budget under chunked prefill (vLLM's max_num_batched_tokens).
	tokenFloor = 8192
)

// DefaultTuning returns the defaults.
func DefaultTuning() Tuning {
	return Tuning{
		IndexEntries:  1 << 18,
		BytesPerToken: 4,
		ShareSlack:    defaultShareSlack,
		ReplicaLoad:   defaultReplicaLoad,
		SketchWidth:   defaultSketchWidth,
		DecayEvery:    defaultDecayEvery,
		Now:           time.Now,
	}
}

func (t Tuning) withDefaults() Tuning {
	d := DefaultTuning() // for unset or meaningless (at most 0) fields
	t.IndexEntries = cmp.Or(max(t.IndexEntries, 0), d.IndexEntries)
	t.BytesPerToken = cmp.Or(max(t.BytesPerToken, 0), d.BytesPerToken)
	t.ShareSlack = cmp.Or(t.ShareSlack, d.ShareSlack) // negative: off
	t.ReplicaLoad = cmp.Or(max(t.ReplicaLoad, 0), d.ReplicaLoad)
	t.SketchWidth = cmp.Or(max(t.SketchWidth, 0), d.SketchWidth)
	t.DecayEvery = cmp.Or(max(t.DecayEvery, 0), d.DecayEvery)
	if t.Now == nil {
		t.Now = d.Now
	}
	return t
}

// Key makes the key of a request under the configuration in force.
func (p *Policy) Key(req Request) Key {
	seed, bs := uint64(0), 64
	if t := p.table.Load(); t != nil {
		seed, bs = t.Cfg.HashSeed, t.BlockSize
	}
	return newKey(req, seed, bs)
}

func (p *Policy) tokensOf(bytes int) int64 {
	return int64(math.Ceil(float64(bytes) / p.tuning.BytesPerToken))
}
