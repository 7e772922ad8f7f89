package policy

import (
	"cmp"
	"math"
	"time"
)

// What the policy is given: the routing document's part (Config), the
// router's own tuning (Tuning) and each request (Request).

// Instance is one backend as the policy sees it.
type Instance struct {
	ID      string
	Address string
	Weight  int // 0 means 1
}

// Config is the part of the routing document the policy needs.
type Config struct {
	Strategy             Strategy
	Model                string
	HashSeed             uint64
	PrefixLength         int // characters (OpenAI) or bytes (/invocations)
	ConcurrencyThreshold int
	Instances            []Instance
	// Adapters maps an adapter name to the IDs of the instances where it is
	// loaded; its requests go only there.
	Adapters map[string][]string
}

// Tuning is the policy's parameters. The router lets a user set two, for
// reasons of their deployment: IndexEntries (memory) and BytesPerToken
// (the tokenizer). The others are the policy's constants, derived where
// they are defined (defaultShareSlack and the rest below); they are fields
// only so that tests and the benchmark's reference rows can vary one (a
// negative ShareSlack turns share balancing off: pure rendezvous
// placement). Zero values take the defaults of DefaultTuning.
type Tuning struct {
	// IndexEntries bounds the prefix index (~48 bytes each): the router's
	// memory, which its pod's limit bounds. The default, 2^18 entries
	// (12 MiB), remembers 2^18 ÷ (up to 16 recorded depths per request) ≥
	// 16k recent requests' placements, several decay periods.
	IndexEntries int
	// BytesPerToken converts prompt text bytes into estimated tokens: 4
	// for English under BPE tokenizers; text in scripts a tokenizer splits
	// finer (CJK: 1–2 bytes per token) wants a lower value.
	BytesPerToken float64

	BlockSize      int     // 0: prefixLength/32, at least 64 (a window is about 32 blocks)
	LookaheadBytes int     // negative: never read past the window
	BalanceFactor  float64 // see defaultBalanceFactor
	ReplicaLoad    float64 // see defaultReplicaLoad
	ShareSlack     float64 // see defaultShareSlack
	MoveSlack      float64 // see defaultMoveSlack
	SketchWidth    int     // see defaultSketchWidth
	DecayEvery     int64   // see defaultDecayEvery
	DecodeTokens   int64   // see defaultDecodeTokens
	TokenBalance   float64 // see defaultTokenBalance
	TokenFloor     int64   // see defaultTokenFloor

	// BenchmarkStrategies accepts the benchmark-only strategies (Baseline,
	// in builds with the benchstrategies tag), for the router's
	// --strategy-override (in the same builds).
	BenchmarkStrategies bool
	// Now is the clock used for ejection deadlines (tests replace it).
	Now func() time.Time
}

const (
	// defaultLookaheadBytes is how far past the window the replica-set
	// walk may read when every block of the window is shared by a dominant
	// fraction of the traffic (a system prompt longer than the window), to
	// find what tells the requests apart: 32 KiB, about 8k tokens, which
	// covers the system prompts of templated bots and agents.
	defaultLookaheadBytes = 32768
	// defaultBalanceFactor caps the requests in flight an overload spill
	// may go to at 1.25 × the average: the bounded-load factor HAProxy
	// (hash-balance-factor 125) and Envoy use, and the paper's
	// (arXiv:1608.01350) example, with which a spill walks past few full
	// instances of its order while no instance runs a quarter over the
	// average.
	defaultBalanceFactor = 1.25
	// defaultReplicaLoad is the part of one instance's fair share of
	// requests a single prefix may bring it before it is served by more
	// instances (⌈fraction × N / ReplicaLoad⌉): three quarters, so that a
	// hot prefix leaves its instances a quarter of their share for the
	// other keys whose first choice they are.
	defaultReplicaLoad = 0.75
	// defaultShareSlack and defaultMoveSlack keep each instance's recent
	// share of requests within 1.10 × the average, the balance the router
	// promises: a new key is placed only on an instance within 1.05 × the
	// average, and a key already placed moves (a cold prefill) only off an
	// instance past 1.08 ×. The gap between them is hysteresis: a key
	// placed under 1.05 × stays until its instance drifts three points
	// further, so keys near the bound do not move back and forth.
	defaultShareSlack = 1.05
	defaultMoveSlack  = 1.08
	// defaultSketchWidth is the popularity sketch's counters per row: it
	// over-estimates a block's fraction by about blocks per request ÷
	// width, 32 ÷ 65,536 ≈ 0.05 % of the traffic, far below the fractions
	// that decide replica sets (a share of one instance, 1/N). 512 KiB.
	defaultSketchWidth = 1 << 16
	// defaultDecayEvery is the policy's memory: popularity and share counts
	// halve every 4,096 decisions, so they weigh about the last 8k
	// requests, hundreds per instance of a fleet of tens, enough that a
	// share is not noise and short enough to follow a change of traffic
	// within minutes.
	defaultDecayEvery = 4096
	// defaultDecodeTokens is the load, in prefill-token equivalents, of
	// one request in flight (decoding, or waiting to): an instance's token
	// load is its unprefilled prompt tokens plus this per request. A
	// decoding request takes a batch slot step after step for its whole
	// response, a few hundred tokens of chat.
	defaultDecodeTokens = 256
	// defaultTokenBalance is when an instance's token load counts as
	// clearly more than another's: twice. Leaving the instance that holds
	// a prefix costs the request a cold prefill elsewhere and sends one
	// more copy of the prefix into a cache; a lighter queue is worth that
	// only when it is a whole average load lighter, not when it is a
	// fraction lighter, which the next few requests erase.
	defaultTokenBalance = 2
	// defaultTokenFloor is the token load under which an instance never
	// counts as overloaded, so that a lightly loaded fleet never spills:
	// the order of one engine step's token budget under chunked prefill
	// (vLLM's max_num_batched_tokens), a queue that a step or two clears,
	// shorter than any cold prefill a spill would cost.
	defaultTokenFloor = 8192
)

// DefaultTuning returns the defaults.
func DefaultTuning() Tuning {
	return Tuning{
		LookaheadBytes: defaultLookaheadBytes,
		BalanceFactor:  defaultBalanceFactor,
		ReplicaLoad:    defaultReplicaLoad,
		ShareSlack:     defaultShareSlack,
		MoveSlack:      defaultMoveSlack,
		IndexEntries:   1 << 18,
		SketchWidth:    defaultSketchWidth,
		DecayEvery:     defaultDecayEvery,
		BytesPerToken:  4,
		DecodeTokens:   defaultDecodeTokens,
		TokenBalance:   defaultTokenBalance,
		TokenFloor:     defaultTokenFloor,
		Now:            time.Now,
	}
}

func (t Tuning) withDefaults() Tuning {
	d := DefaultTuning()
	t.LookaheadBytes = max(cmp.Or(t.LookaheadBytes, d.LookaheadBytes), 0)
	t.BalanceFactor = above(t.BalanceFactor, 1, d.BalanceFactor)
	t.ReplicaLoad = above(t.ReplicaLoad, 0, d.ReplicaLoad)
	// A negative ShareSlack is kept: it turns share balancing off.
	t.ShareSlack = cmp.Or(t.ShareSlack, d.ShareSlack)
	t.MoveSlack = cmp.Or(t.MoveSlack, max(d.MoveSlack, t.ShareSlack))
	t.IndexEntries = above(t.IndexEntries, 0, d.IndexEntries)
	t.SketchWidth = above(t.SketchWidth, 0, d.SketchWidth)
	t.DecayEvery = above(t.DecayEvery, 0, d.DecayEvery)
	t.BytesPerToken = above(t.BytesPerToken, 0, d.BytesPerToken)
	t.DecodeTokens = above(t.DecodeTokens, 0, d.DecodeTokens)
	t.TokenBalance = above(t.TokenBalance, 1, d.TokenBalance)
	t.TokenFloor = above(t.TokenFloor, 0, d.TokenFloor)
	if t.Now == nil {
		t.Now = d.Now
	}
	return t
}

// above returns the default d when v is at or under bound (a knob unset,
// or meaningless: a balance factor of 1 or less caps below the average),
// else v.
func above[T cmp.Ordered](v, bound, d T) T {
	if v <= bound {
		return d
	}
	return v
}

// Request is what the policy knows of a request.
type Request struct {
	// Model is the "model" the client asked for; "" means the served model.
	Model string
	// Tenant isolates identical prompts of different tenants.
	Tenant string
	// Text is the routing text: the window (first prefixLength characters
	// or bytes) followed by up to the lookahead.
	Text []byte
	// WindowBytes is how many bytes of Text form the window.
	WindowBytes int
	// PromptBytes is the length of the whole prompt text, which the routing
	// text may stop short of; 0 means len(Text). It sizes the request's
	// prefill in the token load.
	PromptBytes int
}

func (p *Policy) tokensOf(bytes int) int64 {
	return int64(math.Ceil(float64(bytes) / p.tuning.BytesPerToken))
}
