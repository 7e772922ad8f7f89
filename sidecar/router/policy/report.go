package policy

// The types below are what router replicas exchange so that they share one
// picture of load and placement (see sidecar/router/peers for the
// transport). They are plain values: the policy produces a Report of its own
// work and merges the Reports of its peers; it never talks to the network.

// Report is one router replica's own contribution to the shared picture.
type Report struct {
	// Replica identifies the reporting router replica (its pod name, or its
	// address when it has none); stable for the life of the process.
	Replica string `json:"replica"`
	// Epoch changes when the process restarts, so a peer can tell a
	// restarted replica (whose Seq starts again) from a stale report.
	Epoch uint64 `json:"epoch"`
	// Seq increases with every placement the replica logs; a peer asks for
	// the placements after the Seq it last saw.
	Seq uint64 `json:"seq"`
	// Loads is the replica's own in-flight work per instance (only
	// instances with work or a non-zero share are listed).
	Loads []InstanceLoad `json:"loads,omitempty"`
	// Placements are the prefix placements the replica made after the Seq
	// the peer asked from (bounded: a peer that fell too far behind gets
	// the most recent ones and Truncated).
	Placements []Placement `json:"placements,omitempty"`
	// Truncated says Placements does not reach back to the Seq asked for.
	Truncated bool `json:"truncated,omitempty"`
	// Seen counts the block hashes carried by the requests the replica
	// decided after the Seq asked for, every block it hashed (the ones
	// past the anchor too: its own sketch counts them, and they decide how
	// far a later walk goes), and SeenRequests is how many requests they
	// came from. Every replica adds its peers' to its own popularity
	// sketch, so that all learn which prefixes are popular from the whole
	// traffic, not from the part a Service happened to send them, and walk
	// to the same anchors. Empty on a first pull (Seq 0).
	Seen         []SeenHash `json:"seen,omitempty"`
	SeenRequests int64      `json:"seenRequests,omitempty"`
	// Forward is the address (host:port of its client port) where the
	// replica takes requests forwarded to it as the owner of their
	// instance (see owner.go); empty when it takes none.
	Forward string `json:"forward,omitempty"`
}

// SeenHash is how many requests carried one block hash.
type SeenHash struct {
	Hash  uint64 `json:"h"`
	Count uint32 `json:"n"`
}

// InstanceLoad is one replica's in-flight work on one instance.
type InstanceLoad struct {
	// ID is the instance id of the routing document.
	ID string `json:"id"`
	// Requests is the number of requests in flight from this replica.
	Requests int64 `json:"requests"`
	// PrefillTokens estimates the prompt tokens of those requests that the
	// instance has yet to prefill (not expected to hit its prefix cache,
	// and no first token seen yet).
	PrefillTokens int64 `json:"prefillTokens"`
	// Share is the replica's decayed count of decisions that chose the
	// instance (what placement of new keys balances).
	Share int64 `json:"share"`
}

// Placement records that a replica placed the prefix with block hash Hash
// on an instance.
type Placement struct {
	Hash     uint64 `json:"hash"`
	Instance string `json:"instance"`
	// Version orders placements of the same hash: a placement that moved
	// the key (or placed it first) has a higher version than the one it
	// replaced; the highest wins on every replica (see indexEntry).
	Version uint32 `json:"version,omitempty"`
}
