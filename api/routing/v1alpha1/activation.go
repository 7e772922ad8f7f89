package v1alpha1

// DemandAnnotation, on the routers' election Lease, is when a router last
// held a request for want of an instance (RFC 3339, UTC). The operator
// watches the Lease and scales an endpoint at zero back to one instance on
// it: the routers may already get and update that one Lease, so the
// signal needs no new listener, no new RBAC, and arrives as fast as a
// watch event (well under a second).
const DemandAnnotation = "warmroute.io/demand-at"
