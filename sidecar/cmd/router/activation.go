package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// leaseStamp writes the current time into one annotation of the election
// Lease, in the background and at most once per interval: the router's
// requests, held (routingv1alpha1.DemandAnnotation, which asks the
// operator for an instance; see there for why the Lease) and sent
// (routingv1alpha1.LastRequestAnnotation, its idle clock).
type leaseStamp struct {
	client     kubernetes.Interface
	namespace  string
	lease      string
	annotation string
	interval   time.Duration
	log        logr.Logger
	// last is when the last write started (unix ns; 0: retry at once).
	last atomic.Int64
}

// activationInterval is the least time between two demand writes from one
// replica: requests are held for the length of a model load (minutes), so
// a second's resolution loses nothing, and the Lease, which the picker
// election renews every second, sees at most one more write a second per
// replica while requests are held.
const activationInterval = time.Second

// request stamps the Lease in the background, at most once per interval;
// it is a router hook and returns at once.
func (a *leaseStamp) request() {
	now := time.Now()
	prev := a.last.Load()
	if now.UnixNano()-prev < int64(a.interval) || !a.last.CompareAndSwap(prev, now.UnixNano()) {
		return
	}
	go a.write(now)
}

// stampTimeout bounds one stamp's Lease write, retries included: with an
// API server that stalls, at most stampTimeout/interval writes of a stamp
// are pending (5 of the demand stamp, 1 of the last-request stamp).
const stampTimeout = 5 * time.Second

func (a *leaseStamp) write(at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), stampTimeout)
	defer cancel()
	leases := a.client.CoordinationV1().Leases(a.namespace)
	// The elected leader renews the same Lease: a conflict is its renewal,
	// and the write is redone on the fresh object.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, a.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Other replicas stamp too: a time is never moved back.
		if prev, err := time.Parse(time.RFC3339Nano, l.Annotations[a.annotation]); err == nil && !prev.Before(at) {
			return nil
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[a.annotation] = at.UTC().Format(time.RFC3339Nano)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		a.last.Store(0) // the next request tries again
		a.log.Error(err, "could not stamp the Lease", "lease", a.namespace+"/"+a.lease, "annotation", a.annotation)
		return
	}
	a.log.V(1).Info("stamped the Lease", "lease", a.namespace+"/"+a.lease, "annotation", a.annotation)
}

// leaseHooks are the router's OnHold (a demand stamp) and OnForward (a
// last-request stamp) with --lease.
func leaseHooks(client kubernetes.Interface, p pickerFlags, log logr.Logger) (onHold, onForward func()) {
	log = log.WithName("activation")
	demand := &leaseStamp{client: client, namespace: p.leaseNamespace, lease: p.leaseName, log: log,
		annotation: routingv1alpha1.DemandAnnotation, interval: activationInterval}
	served := &leaseStamp{client: client, namespace: p.leaseNamespace, lease: p.leaseName, log: log,
		annotation: routingv1alpha1.LastRequestAnnotation, interval: routingv1alpha1.LastRequestInterval}
	return demand.request, served.request
}
