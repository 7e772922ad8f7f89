package policy

import (
	"sync/atomic"

	"github.com/warmroute/warmroute/sidecar/router/fleet"
)

// Spill reasons, as counted in metrics.
const (
	SpillNone        = ""
	SpillConcurrency = "concurrency_threshold" // preferred over the threshold, walked its order
	SpillAllBusy     = "all_busy"              // nobody under threshold and cap: least loaded
	SpillTokens      = "token_load"            // another instance under the threshold clearly cheaper
	SpillUnhealthy   = "unhealthy"             // preferred instance ejected by health checks
)

// Key move reasons, as counted in metrics: why PREFIX_AWARE placed a key
// its prefix index knew off the instance the index held it on (see
// sticky). Each move costs the key a cold prefill.
const (
	MoveNone       = ""
	MoveShare      = "share"       // its instance's share was over moveSlack × the average
	MoveJoining    = "joining"     // its first choice joined the fleet lately
	MoveHolderLeft = "holder_left" // its instance left its set; back to the one before
)

// Choice is the outcome of a decision: the instance to use first and the
// order to fall back along after connection failures. The chosen instance
// is counted in flight until Done, and its estimated prefill in its token
// load until Prefilled (or Done).
type Choice struct {
	t        *table
	order    []int
	unranked unranked
	pos      int
	// prefill is the token load charged to the current instance.
	prefill int64
	// prompt is the request's whole prompt in tokens: what a fallback
	// instance, not expected to hold any of it, is charged.
	prompt    int64
	prefilled atomic.Bool
	done      atomic.Bool
	// warm is the warm copy to send a joiner (nil: none; see warm.go).
	warm *warm

	Decision
}

// Decision is what a decision says of itself, for metrics and logs.
type Decision struct {
	Strategy Strategy
	// Spill is why the preferred instance was not used ("" if it was).
	Spill string
	// AnchorDepth is the block depth that placed the request (PREFIX_AWARE).
	AnchorDepth int32
	// ColdPlaced says a new key with a long prompt was placed where its
	// prefill would finish first rather than on its first choice
	// (PREFIX_AWARE, see coldPlacement).
	ColdPlaced bool
	// Moved says why a key the prefix index knew left the instance the
	// index held it on (PREFIX_AWARE, one of the Move reasons); MoveNone
	// when it stayed, was new, or was spilled.
	Moved string
	// MatchChars estimates how much of the routing text the chosen
	// instance has recently been sent.
	MatchChars int
}

// Instance is the current target.
func (c *Choice) Instance() Instance { return c.t.members[c.order[c.pos]].Instance }

func (c *Choice) stat() *fleet.Stat { return c.t.members[c.order[c.pos]].stat }

// Next moves to the next instance of the preference order after a failure
// before any byte was exchanged; false when the order is exhausted.
func (c *Choice) Next() bool {
	if c.done.Load() || c.pos+1 >= len(c.order) {
		return false
	}
	if c.pos+1 >= len(c.order)-c.unranked.n {
		c.unranked.rank(c.t, c.order)
	}
	c.release()
	c.pos++
	c.prefill = c.prompt
	c.charge()
	return true
}

// Prefilled says the instance has prefilled the prompt (the first token,
// or the whole non-streamed response, arrived): the request leaves the
// instance's prefill load and counts as decoding until Done.
func (c *Choice) Prefilled() {
	if !c.done.Load() && !c.prefilled.Swap(true) {
		c.stat().Prefill.Add(-c.prefill)
	}
}

// Done releases the in-flight slot; calling it twice is harmless.
func (c *Choice) Done() {
	if !c.done.Swap(true) {
		c.release()
	}
}

func (c *Choice) charge() {
	s := c.stat()
	s.InFlight.Add(1)
	if !c.prefilled.Load() {
		s.Prefill.Add(c.prefill)
	}
}

func (c *Choice) release() {
	s := c.stat()
	s.InFlight.Add(-1)
	if !c.prefilled.Load() {
		s.Prefill.Add(-c.prefill)
	}
}
