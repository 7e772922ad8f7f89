// Package peers is the transport that gives every router replica one shared
// picture of load and placement: each replica serves its own report on its
// metrics port and pulls its peers' reports every interval. What a report
// contains and how reports merge is the policy's business
// (sidecar/router/policy); this package only moves them, finds the peers
// and says, in metrics, when the shared picture degrades.
package peers

import (
	"cmp"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Paths served under the router's metrics listener.
const (
	Prefix       = "/peer/v1/"
	ReportPath   = Prefix + "report"
	SnapshotPath = Prefix + "snapshot"
	AckPath      = Prefix + "ack"
	PokePath     = Prefix + "poke"
)

// State is what the transport needs from the policy; *policy.Policy
// implements it.
type State interface {
	// LocalReport is this replica's own work, with the placements after
	// since, for the peer named puller ("" for no peer: this replica
	// itself); Replica and Epoch are filled by the transport.
	LocalReport(puller string, since uint64) policy.Report
	// PeerApplied says the peer named puller has applied the report with
	// sequence number seq that it pulled last.
	PeerApplied(puller string, seq uint64)
	// ApplyPeer merges a peer's report, replacing its previous one.
	ApplyPeer(r policy.Report)
	// ForgetPeer drops what a peer reported (it is gone or unreachable).
	ForgetPeer(replica string)
	// SetReplicas tells the policy how many router replicas share the
	// traffic, this one included.
	SetReplicas(n int)
	// Snapshot and Restore carry the whole placement state to a replica
	// that starts, so it agrees with the others at once.
	Snapshot() []byte
	Restore(b []byte) error
	// Peek is where a request would go, without counting it anywhere.
	Peek(req policy.Request) (policy.Peeked, error)
	// LongPrefills receives when this replica has sent a prefill its
	// peers should learn of before their next pull.
	LongPrefills() <-chan struct{}
}

// Waker is told that the peer named replica asked to be pulled at once;
// *Puller implements it.
type Waker interface {
	Wake(replica string)
}

// Options configures both sides of the exchange.
type Options struct {
	// Replica is this replica's stable name (its pod name).
	Replica string
	// Interval is the pull period per peer.
	Interval time.Duration
	// StaleAfter is how long a peer may fail before its report is dropped
	// and the router falls back to what it knows without it.
	StaleAfter time.Duration
	// BootstrapWait bounds the wait for a snapshot at start.
	BootstrapWait time.Duration
	// MaxReportBytes and MaxSnapshotBytes bound what is served and read.
	MaxReportBytes, MaxSnapshotBytes int64
}

// Defaults of the flags.
const (
	DefaultInterval         = 100 * time.Millisecond
	DefaultStaleAfter       = time.Second
	DefaultBootstrapWait    = 3 * time.Second
	DefaultMaxReportBytes   = 4 << 20
	DefaultMaxSnapshotBytes = 64 << 20
)

// HeldFor bounds how long a peer may still hold a report it pulled from
// this replica after its last pull: it forgets this replica only once its
// pulls have failed for StaleAfter, which it notices when a failing pull
// ends (up to the pull timeout, see pullTimeout) and at most an Interval
// later. The policy keeps counting what such a peer holds for that long
// (policy.Tuning.PullerGone); every replica of a Deployment runs with the
// same flags, so this replica's options are its peers'.
func (o Options) HeldFor() time.Duration {
	o = o.withDefaults()
	return o.StaleAfter + o.pullTimeout() + o.Interval
}

// wakeGap is the least time between two pulls of one peer when it pokes:
// an eighth of the interval, at most 10 ms, so that a peer sending long
// prefills back to back makes this replica pull it at most eight times as
// often as the interval says and at most 100 times a second.
func (o Options) wakeGap() time.Duration { return min(o.Interval/8, 10*time.Millisecond) }

// pullTimeout bounds each pull below the stale window, so a hung peer
// turns stale in time.
func (o Options) pullTimeout() time.Duration { return max(o.StaleAfter/2, o.Interval) }

// withDefaults gives every unset or non-positive field its default
// (max maps a negative to zero, which cmp.Or replaces).
func (o Options) withDefaults() Options {
	o.Interval = cmp.Or(max(o.Interval, 0), DefaultInterval)
	o.StaleAfter = cmp.Or(max(o.StaleAfter, 0), DefaultStaleAfter)
	o.BootstrapWait = cmp.Or(max(o.BootstrapWait, 0), DefaultBootstrapWait)
	o.MaxReportBytes = cmp.Or(max(o.MaxReportBytes, 0), DefaultMaxReportBytes)
	o.MaxSnapshotBytes = cmp.Or(max(o.MaxSnapshotBytes, 0), DefaultMaxSnapshotBytes)
	return o
}
