package v1alpha1

import "time"

// DemandAnnotation, on the routers' election Lease, is when a router last
// held a request for want of an instance (RFC 3339, UTC). The operator
// watches the Lease and scales an endpoint at zero back to one instance on
// it: the routers may already get and update that one Lease, so the
// signal needs no new listener, no new RBAC, and arrives as fast as a
// watch event (well under a second).
const DemandAnnotation = "warmroute.io/demand-at"

// LastRequestAnnotation, on the same Lease, is when a router last sent a
// request to an instance (RFC 3339, UTC), written at most every
// LastRequestInterval by each router replica and never moved back. The
// operator scales an endpoint with spec.scaling.scaleToZeroAfter to zero
// once this, and the demand stamp, are older than that period.
const LastRequestAnnotation = "warmroute.io/last-request-at"

// LastRequestInterval is the least time between two last-request stamps
// from one router replica. The shortest idle period the API accepts is
// 30 s: a stamp at most 5 s old errs by a sixth of it at worst, always
// towards staying up; and a busy endpoint adds one Lease write per 5 s per
// router replica to the picker election's one a second.
const LastRequestInterval = 5 * time.Second
