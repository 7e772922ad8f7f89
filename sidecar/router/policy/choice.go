package policy

import "github.com/warmroute/warmroute/sidecar/router/fleet"

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

// Choice is the outcome of a decision (see package fleet); Decision is
// what it says of itself.
type (
	Choice   = fleet.Choice
	Decision = fleet.Decision
)
