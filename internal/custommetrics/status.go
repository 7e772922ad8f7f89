package custommetrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// StatusPublisher copies the Store into each LLMEndpoint's status.load,
// so that `kubectl get llme` shows load and hit rate. It writes at most
// once per endpoint per Period, and only when the rounded figures changed.
type StatusPublisher struct {
	// Client reads endpoints from the cache and patches their status.
	Client client.Client
	Store  *Store
	// Period between passes (default 30 s).
	Period time.Duration
}

// Start publishes until ctx ends; only the leader writes (a
// manager.Runnable, leader-elected by default).
func (p *StatusPublisher) Start(ctx context.Context) error {
	if p.Period <= 0 {
		p.Period = 30 * time.Second
	}
	t := time.NewTicker(p.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := p.PublishOnce(ctx); err != nil {
			log.FromContext(ctx).Error(err, "publish endpoint load to status")
		}
	}
}

// PublishOnce writes each endpoint's load where it changed; one pass
// writes each endpoint at most once.
func (p *StatusPublisher) PublishOnce(ctx context.Context) error {
	var eps v1alpha1.LLMEndpointList
	if err := p.Client.List(ctx, &eps); err != nil {
		return fmt.Errorf("list LLMEndpoints: %w", err)
	}
	var errs []error
	for i := range eps.Items {
		ep := &eps.Items[i]
		l, ok := p.Store.Get(types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name})
		if !ok {
			continue
		}
		want := LoadStatus(l)
		if sameFigures(ep.Status.Load, want) {
			continue
		}
		// A merge patch of status.load alone: it cannot undo what the
		// reconciler writes in the same status.
		body, err := json.Marshal(map[string]any{"status": map[string]any{"load": want}})
		if err != nil {
			return err
		}
		if err := p.Client.Status().Patch(ctx, ep, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("patch status.load of %s/%s: %w", ep.Namespace, ep.Name, err))
		}
	}
	return errors.Join(errs...)
}

// LoadStatus renders a Load for the status, rounded for display.
func LoadStatus(l Load) *v1alpha1.LoadStatus {
	st := &v1alpha1.LoadStatus{ObservedTime: ptr.To(metav1.NewTime(l.Time))}
	if l.InFlightKnown {
		st.InFlightPerInstance = decimal(l.InFlightPerInstance())
	}
	if l.WaitingKnown {
		st.WaitingPerInstance = decimal(l.WaitingPerInstance())
	}
	if l.HitRatioKnown {
		st.PrefixCacheHitPercent = ptr.To(int32(math.Round(l.HitRatio * 100)))
	}
	return st
}

// decimal has one decimal place, enough to read load by eye and coarse
// enough that noise does not cause a write every pass.
func decimal(v float64) string {
	return strconv.FormatFloat(math.Max(v, 0), 'f', 1, 64)
}

// sameFigures compares everything but the time of measurement.
func sameFigures(a, b *v1alpha1.LoadStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.InFlightPerInstance == b.InFlightPerInstance && a.WaitingPerInstance == b.WaitingPerInstance &&
		ptr.Equal(a.PrefixCacheHitPercent, b.PrefixCacheHitPercent)
}
