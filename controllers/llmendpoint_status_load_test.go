package controllers

import (
	"testing"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// status.load is written by the operator's load publisher
// (internal/custommetrics), not observed by the reconciler: a reconcile
// must keep it, or every reconcile would erase the LOAD and HIT% columns
// and the publisher would write them back, a write per reconcile.
func TestBuildStatusKeepsTheLoad(t *testing.T) {
	ep := newEndpoint()
	ep.Status.Load = &v1alpha1.LoadStatus{InFlightPerInstance: "3.5", WaitingPerInstance: "0.0", PrefixCacheHitPercent: ptr.To(int32(71))}
	st := buildStatus(ep, observed{})
	if st.Load == nil || st.Load.InFlightPerInstance != "3.5" || ptr.Deref(st.Load.PrefixCacheHitPercent, 0) != 71 {
		t.Errorf("status.load after a reconcile = %+v, want the publisher's", st.Load)
	}
}
