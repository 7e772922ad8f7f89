package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/config"
)

// activationInterval is the least time between two demand writes from one
// replica: requests are held for the length of a model load (minutes), so
// a second's resolution loses nothing, and the Lease, which the picker
// election renews every second, sees at most one more write a second per
// replica while requests are held.
const activationInterval = time.Second

// activation asks the operator for an instance by stamping the election
// Lease with routingv1alpha1.DemandAnnotation (see there for why the
// Lease).
type activation struct {
	client    kubernetes.Interface
	namespace string
	lease     string
	log       logr.Logger
	// last is when the last write started (unix ns; 0: retry at once).
	last atomic.Int64
}

// request stamps the Lease in the background, at most once per
// activationInterval; it is the router's OnHold and returns at once.
func (a *activation) request() {
	now := time.Now()
	prev := a.last.Load()
	if now.UnixNano()-prev < int64(activationInterval) || !a.last.CompareAndSwap(prev, now.UnixNano()) {
		return
	}
	go a.write(now)
}

func (a *activation) write(at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leases := a.client.CoordinationV1().Leases(a.namespace)
	// The elected leader renews the same Lease: a conflict is its renewal,
	// and the write is redone on the fresh object.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, a.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[routingv1alpha1.DemandAnnotation] = at.UTC().Format(time.RFC3339Nano)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		a.last.Store(0) // the next held request tries again
		a.log.Error(err, "could not ask for an instance", "lease", a.namespace+"/"+a.lease)
		return
	}
	a.log.Info("asked for an instance: requests are held", "lease", a.namespace+"/"+a.lease)
}

// activationHook is the router's OnHold: with --lease, a demand stamp on
// that Lease (nil without one: nobody to ask).
func activationHook(f *flags, log logr.Logger) (func(), error) {
	if f.picker.lease == "" {
		return nil, nil
	}
	ns, name, err := config.ParseConfigMapRef(f.picker.lease)
	if err != nil {
		return nil, fmt.Errorf("--lease: %w", err)
	}
	client, err := kubeClient(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	a := &activation{client: client, namespace: ns, lease: name, log: log.WithName("activation")}
	return a.request, nil
}
