/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// Scale to zero and back. The routers stamp their election Lease with the
// time they last sent a request to an instance and the time they last held
// one for want of an instance (api/routing/v1alpha1). Those stamps are the
// idle clock: they are written by the only process that sees every request,
// kept in the cluster (an operator restart or a new leader loses nothing),
// and need no metrics scraper, which is optional. The operator watches the
// Lease (a change of its annotations, not the election's renewals, starts
// a reconcile), so a held request reaches it as one watch event.
//
// It changes spec.replicas through the scale subresource, as an
// HorizontalPodAutoscaler does, so the write conflicts (and is retried on
// the fresh object) rather than overwriting a concurrent scale.

// The operator reads the Lease annotations from its cache and scales the
// endpoint.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups=serving.warmroute.dev,resources=llmendpoints/scale,verbs=get;update

// idleInput is what the scale-to-zero decision looks at; a zero time is
// "never".
type idleInput struct {
	now time.Time
	// after is spec.scaling.scaleToZeroAfter (0: never scale to zero).
	after    time.Duration
	replicas int32
	// lastRequest and demand are the routers' stamps on the Lease.
	lastRequest, demand time.Time
	// scaledToZero and woke are the operator's record on the endpoint.
	scaledToZero, woke time.Time
}

// idleDecision is what to do about it.
type idleDecision struct {
	// replicas is the spec.replicas wanted.
	replicas int32
	// reason is v1alpha1.ReasonIdle (to 0), v1alpha1.ReasonActivated (to
	// 1), or empty (no scale).
	reason string
	// recordWake: the idle period runs from now, since spec.replicas left
	// 0 by another hand, or the operator sees the setting for the first
	// time (an endpoint that served before its routers stamped requests
	// must not look idle since its creation).
	recordWake bool
	// recheck is when the endpoint goes idle if nothing happens meanwhile
	// (0: only an event changes the decision).
	recheck time.Duration
}

// decideIdle is the scale-to-zero decision.
func decideIdle(in idleInput) idleDecision {
	keep := idleDecision{replicas: in.replicas}
	switch {
	case in.after <= 0:
		return keep
	case in.replicas == 0:
		// Only demand newer than the scale-down and than the last served
		// request wakes it: a request held, timed out and never served
		// must not wake it again after each idle period, and a user's own
		// scale to 0 after traffic stays.
		if in.demand.After(latest(in.scaledToZero, in.lastRequest)) {
			return idleDecision{replicas: 1, reason: v1alpha1.ReasonActivated}
		}
		return keep
	case !in.scaledToZero.IsZero() || in.woke.IsZero():
		keep.recordWake = true
		keep.recheck = in.after
		return keep
	}
	idle := in.now.Sub(latest(in.lastRequest, in.demand, in.woke))
	if idle >= in.after {
		return idleDecision{replicas: 0, reason: v1alpha1.ReasonIdle}
	}
	keep.recheck = in.after - idle
	return keep
}

func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// reconcileScaleToZero applies decideIdle: it records the crossing on the
// endpoint, then scales it. It returns when to look again.
func (r *LLMEndpointReconciler) reconcileScaleToZero(ctx context.Context, ep *v1alpha1.LLMEndpoint, now time.Time) (time.Duration, error) {
	after := v1alpha1.ScaleToZeroAfter(ep)
	if after <= 0 {
		return 0, nil
	}
	in := idleInput{now: now, after: after, replicas: v1alpha1.Replicas(ep),
		scaledToZero: stamp(ep.Annotations, v1alpha1.AnnotationScaledToZeroAt),
		woke:         stamp(ep.Annotations, v1alpha1.AnnotationWokeAt)}
	lease := &coordinationv1.Lease{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: ep.Namespace, Name: routerLeaseName(ep)}, lease); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return 0, fmt.Errorf("get router Lease: %w", err)
	default:
		in.lastRequest = stamp(lease.Annotations, routingv1alpha1.LastRequestAnnotation)
		in.demand = stamp(lease.Annotations, routingv1alpha1.DemandAnnotation)
	}
	d := decideIdle(in)
	switch {
	case d.recordWake:
		return d.recheck, r.recordCrossing(ctx, ep, false, now)
	case d.reason == "":
		return d.recheck, nil
	}
	if err := r.recordCrossing(ctx, ep, d.reason == v1alpha1.ReasonIdle, now); err != nil {
		return 0, err
	}
	// The patch above gave ep the resourceVersion the scale is made
	// against: a scale by another hand since then is a conflict.
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: ep.Name, Namespace: ep.Namespace, ResourceVersion: ep.ResourceVersion}, Spec: autoscalingv1.ScaleSpec{Replicas: d.replicas}}
	if err := r.SubResource("scale").Update(ctx, ep, client.WithSubResourceBody(scale)); err != nil {
		return 0, fmt.Errorf("scale to %d: %w", d.replicas, err)
	}
	ep.Spec.Replicas = ptr.To(d.replicas)
	if d.reason == v1alpha1.ReasonIdle {
		r.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, d.reason, "Scale",
			"no request for %s (spec.scaling.scaleToZeroAfter): scaled to 0; the next request scales to 1", after)
	} else {
		r.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, d.reason, "Scale",
			"a request is held at zero instances (demand at %s): scaled to 1", in.demand.UTC().Format(time.RFC3339Nano))
	}
	logf.FromContext(ctx).Info("scaled from or to zero", "reason", d.reason, "replicas", d.replicas)
	return 0, nil
}

// recordCrossing records on the endpoint that it crossed zero now: down
// (toZero, AnnotationScaledToZeroAt) or up (AnnotationWokeAt). It sets that
// annotation and drops the other, in a merge patch of the annotations.
func (r *LLMEndpointReconciler) recordCrossing(ctx context.Context, ep *v1alpha1.LLMEndpoint, toZero bool, now time.Time) error {
	set, drop := v1alpha1.AnnotationWokeAt, v1alpha1.AnnotationScaledToZeroAt
	if toZero {
		set, drop = drop, set
	}
	before := ep.DeepCopy()
	if ep.Annotations == nil {
		ep.Annotations = map[string]string{}
	}
	ep.Annotations[set] = now.UTC().Format(time.RFC3339Nano)
	delete(ep.Annotations, drop)
	if err := r.Patch(ctx, ep, client.MergeFrom(before), client.FieldOwner(FieldOwner)); err != nil {
		*ep = *before
		return fmt.Errorf("record %s: %w", set, err)
	}
	return nil
}

// stamp parses a time annotation; a missing or malformed one is "never".
func stamp(annotations map[string]string, key string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, annotations[key])
	if err != nil {
		return time.Time{}
	}
	return t
}
