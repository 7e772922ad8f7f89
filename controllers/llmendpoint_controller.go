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

// Package controllers holds the LLMEndpoint reconciler: it turns an
// LLMEndpoint into a vLLM Deployment and its headless Service, the routing
// ConfigMap, a router Deployment with its ServiceAccount, Role,
// RoleBinding and client-facing Service, a PodDisruptionBudget for each
// Deployment and NetworkPolicies around both, keeps them true to the spec
// and deletes those the spec no longer asks for.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
)

// FieldOwner is the field manager of every server-side apply the operator
// makes.
const FieldOwner = "warmroute-operator"

// Options are the operator-wide settings the builders need besides the spec.
type Options struct {
	// VLLMImage is the vLLM image for endpoints that do not name one.
	VLLMImage string
	// RouterImage is the router image for endpoints that do not name one.
	RouterImage string
	// VLLM is the identity of the vLLM pods. The stock vLLM image declares
	// no user (so it would run as root, which the pods refuse): outside
	// OpenShift it needs a UID here; OpenShift's restricted-v2 assigns the
	// UID and fsGroup from the namespace's range and refuses pods that fix
	// them, so there it is empty.
	VLLM PodIdentity
	// MetricsScraper, when set, selects the operator's own pods, which
	// scrape the routers' and instances' metrics for the custom metrics
	// API: the endpoints' NetworkPolicies admit it to those ports.
	MetricsScraper *networkingv1.NetworkPolicyPeer
}

// CacheHeat is the recent prefix-cache hits of each vLLM pod of an
// endpoint, when known (internal/custommetrics.Store).
type CacheHeat interface {
	// PodHitTokens maps each measured pod's name to its recent hit
	// tokens; false while none are known.
	PodHitTokens(types.NamespacedName) (map[string]float64, bool)
}

// LLMEndpointReconciler reconciles LLMEndpoint objects.
type LLMEndpointReconciler struct {
	client.Client
	// APIReader reads around the cache, to tell an object the operator does
	// not manage (and so does not cache) from one that does not exist.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	Options   Options
	// Heat, when set, tells how many cache hits each vLLM pod served
	// recently (the operator's metrics scraper), which then sets the pods'
	// deletion costs; without it they follow the pods' age.
	Heat CacheHeat

	applied appliedCache
	// pools starts the InferencePool watch once the API is served.
	pools lateAPI
	// objectives starts the InferenceObjective watch once the API is
	// served (llmendpoint_objectives.go).
	objectives lateAPI
	// objectivesMissing logs once that the InferenceObjective API is not
	// served.
	objectivesMissing sync.Once
	// inferencePoolRecheck overrides inferencePoolRecheck (tests).
	inferencePoolRecheck time.Duration
	// saltSecrets is, per LLMEndpoint name, the saltSeen of its salt
	// Secret.
	saltSecrets sync.Map
}

// The endpoint is patched to record the default images its instances run.
// +kubebuilder:rbac:groups=serving.warmroute.dev,resources=llmendpoints,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=serving.warmroute.dev,resources=llmendpoints/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=serving.warmroute.dev,resources=llmendpoints/finalizers,verbs=update
// Every owned kind may be deleted: the prune phase removes objects the
// endpoint no longer wants.
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;patch;delete
// The router Role grants get/list/watch on one ConfigMap; granting needs holding.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch;delete
// Pods are read for the routing configuration and annotated with their deletion cost.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile makes the cluster match one LLMEndpoint: it applies each owned
// object in order (the routing ConfigMap first, because it is what moves
// traffic), collects the errors rather than stopping at the first, and
// rebuilds the status from what exists in one deferred write.
func (r *LLMEndpointReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	log := logf.FromContext(ctx)

	ep := &v1alpha1.LLMEndpoint{}
	if err := r.Get(ctx, req.NamespacedName, ep); err != nil {
		if apierrors.IsNotFound(err) {
			r.applied.forget(req.NamespacedName)
			r.saltSecrets.Delete(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get LLMEndpoint: %w", err)
	}
	if !ep.DeletionTimestamp.IsZero() {
		// The garbage collector removes the owned objects.
		return ctrl.Result{}, nil
	}

	pods, err := r.instancePods(ctx, ep)
	if err != nil {
		return ctrl.Result{}, err
	}

	// Placing afresh when the current placement cannot be read would move
	// adapters for nothing: wait for it instead.
	current, err := r.currentPlacement(ctx, ep)
	if err != nil {
		return ctrl.Result{}, err
	}

	ctx, wanted := withWantedObjects(ctx)

	// The routing document and the status both show where the adapters
	// are placed: it is worked out once, from the same pods.
	obs := observed{pods: pods, placements: placeAdapters(ep, pods, current)}
	var errs []error
	defer func() {
		obs.err = errors.Join(errs...)
		if err := r.updateStatus(ctx, ep, obs); err != nil {
			errs = append(errs, err)
		}
		if retErr = errors.Join(errs...); retErr != nil {
			result = ctrl.Result{} // the error requeues with back-off
		}
	}()

	var drainEnd time.Duration
	obs.routingHash, drainEnd, err = r.reconcileRoutingConfig(ctx, ep, pods, obs.placements, time.Now())
	errs = appendErr(errs, "routing ConfigMap", err)
	errs = appendErr(errs, "LoRA agent RBAC", r.reconcileLoRAAgentRBAC(ctx, ep))
	errs = appendErr(errs, "default images", r.recordDefaultImages(ctx, ep))
	errs = appendErr(errs, "model cache", r.reconcileModelCache(ctx, ep))
	// Before the vLLM Deployment, which then takes the new replicas.
	idleRecheck, err := r.reconcileScaleToZero(ctx, ep, time.Now())
	errs = appendErr(errs, "scale to zero", err)
	if loraEnabled(ep) {
		obs.loraAgentConfined, err = r.loraAgentConfinement(ctx)
		errs = appendErr(errs, "LoRA agent admission policy", err)
	}
	// Costs first: a scale-in this reconcile applies to the Deployment
	// then removes the instance that is coldest now.
	next, err := r.reconcileDeletionCosts(ctx, ep, pods, time.Now())
	errs = appendErr(errs, "pod deletion costs", err)
	errs = appendErr(errs, "vLLM", r.reconcileVLLM(ctx, ep))
	errs = appendErr(errs, "router", r.reconcileRouter(ctx, ep))
	var pool inferencePoolResult
	pool, err = r.reconcileInferencePool(ctx, ep)
	obs.inferencePool = pool.condition
	errs = appendErr(errs, "InferencePool", err)
	errs = appendErr(errs, "PodDisruptionBudgets", r.reconcileDisruptionBudgets(ctx, ep))
	errs = appendErr(errs, "NetworkPolicies", r.reconcileNetworkPolicies(ctx, ep))
	if len(errs) == 0 {
		errs = appendErr(errs, "pruning", r.prune(ctx, ep, wanted, prunableKinds(pool.served)))
	}

	if len(errs) > 0 {
		return result, nil // the deferred status write returns errs
	}
	// The soonest of the phases' timed looks again.
	for _, at := range []struct {
		after  time.Duration
		reason string
	}{
		{drainEnd, "a draining instance's leaving"},
		{next, "the next deletion-cost step"},
		{pool.recheck, "the InferencePool API"},
		{idleRecheck, "the idle period's end"},
	} {
		if at.after > 0 && (result.RequeueAfter == 0 || at.after < result.RequeueAfter) {
			log.V(1).Info("requeue", "for", at.reason, "after", at.after)
			result.RequeueAfter = at.after
		}
	}
	return result, nil
}

func appendErr(errs []error, what string, err error) []error {
	if err == nil {
		return errs
	}
	return append(errs, fmt.Errorf("%s: %w", what, err))
}

// instancePods lists the endpoint's vLLM pods from the cache.
func (r *LLMEndpointReconciler) instancePods(ctx context.Context, ep *v1alpha1.LLMEndpoint) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(ep.Namespace), client.MatchingLabels(selectorLabels(ep, roleVLLM))); err != nil {
		return nil, fmt.Errorf("list vLLM pods: %w", err)
	}
	return list.Items, nil
}

// SetupWithManager registers the reconciler: it owns every object it
// creates and watches the vLLM pods, whose readiness drives the routing
// configuration.
func (r *LLMEndpointReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrentReconciles int) error {
	return r.setup(mgr, maxConcurrentReconciles, r)
}

// setup registers do, which is r or (in tests) a wrapper of it.
func (r *LLMEndpointReconciler) setup(mgr ctrl.Manager, maxConcurrentReconciles int, do reconcile.Reconciler) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("warmroute-operator")
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.LLMEndpoint{})
	for _, k := range ownedKinds {
		b = b.Owns(k.object())
	}
	// The routers' Lease: its stamps drive scale to and from zero
	// (llmendpoint_scaletozero.go); its renewals, every second, do not.
	b = b.Owns(&coordinationv1.Lease{}, builder.WithPredicates(predicate.AnnotationChangedPredicate{}))
	c, err := b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToEndpoint)).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicy{}, handler.EnqueueRequestsFromMapFunc(r.loraEndpoints)).
		Watches(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, handler.EnqueueRequestsFromMapFunc(r.loraEndpoints)).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Named("llmendpoint").
		Build(do)
	if err != nil {
		return err
	}
	// InferencePools are owned too, but their API may be installed after
	// the operator starts: the watch starts when a reconcile first finds it.
	r.pools.gvk = inferencepool.GroupVersion.WithKind(inferencepool.Kind)
	r.pools.start = func() error {
		return c.Watch(crsource.Kind(mgr.GetCache(), &inferencepool.InferencePool{},
			handler.TypedEnqueueRequestForOwner[*inferencepool.InferencePool](mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.LLMEndpoint{}, handler.OnlyControllerOwner())))
	}
	// InferenceObjectives, read for their priorities, likewise.
	r.objectives.gvk = inferencepool.ObjectiveGroupVersion.WithKind(inferencepool.ObjectiveKind)
	r.objectives.start = func() error {
		return c.Watch(crsource.Kind(mgr.GetCache(), &inferencepool.InferenceObjective{},
			handler.TypedEnqueueRequestsFromMapFunc(objectiveToEndpoint)))
	}
	return nil
}

// podToEndpoint maps a vLLM pod to the LLMEndpoint it serves.
func podToEndpoint(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[LabelEndpoint]
	if !ok || obj.GetLabels()[LabelRole] != roleVLLM {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// CacheOptions restricts the manager's cache of the kinds the operator
// owns or watches to objects labelled with an endpoint, so that a large
// cluster's Pods and ConfigMaps are not all held in memory.
func CacheOptions() cache.Options {
	managed, err := labels.NewRequirement(LabelEndpoint, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant requirement
	}
	byLabel := cache.ByObject{Label: labels.NewSelector().Add(*managed)}
	byObject := map[client.Object]cache.ByObject{&corev1.Pod{}: byLabel, &coordinationv1.Lease{}: byLabel}
	for _, k := range ownedKinds {
		byObject[k.object()] = byLabel
	}
	admissionPolicyCache(byObject)
	return cache.Options{ByObject: byObject}
}

// Labels on every object the operator creates for an endpoint. The
// endpoint and role labels select the pods and never change.
const (
	// LabelEndpoint names the LLMEndpoint an object belongs to.
	LabelEndpoint = "serving.warmroute.dev/endpoint"
	// LabelRole is vllm, router or routing.
	LabelRole = "serving.warmroute.dev/role"

	roleVLLM    = "vllm"
	roleRouter  = "router"
	roleRouting = "routing"
)

// selectorLabels select the pods of one role of one endpoint.
func selectorLabels(ep *v1alpha1.LLMEndpoint, role string) map[string]string {
	return map[string]string{LabelEndpoint: ep.Name, LabelRole: role}
}

// objectLabels are selectorLabels plus the recommended app.kubernetes.io set.
func objectLabels(ep *v1alpha1.LLMEndpoint, role, app string) map[string]string {
	l := selectorLabels(ep, role)
	l["app.kubernetes.io/name"] = app
	l["app.kubernetes.io/instance"] = ep.Name
	l["app.kubernetes.io/component"] = role
	l["app.kubernetes.io/part-of"] = "warmroute"
	l["app.kubernetes.io/managed-by"] = FieldOwner
	return l
}

// Names of the owned objects. Every one is the endpoint's name plus a
// suffix of its kind (the client-facing Service has none, and endpoint
// names may not end in -vllm), so two endpoints never collide.
func vllmName(ep *v1alpha1.LLMEndpoint) string          { return ep.Name + "-vllm" }
func routerName(ep *v1alpha1.LLMEndpoint) string        { return ep.Name + "-router" }
func routerServiceName(ep *v1alpha1.LLMEndpoint) string { return ep.Name }
func routingConfigMapName(ep *v1alpha1.LLMEndpoint) string {
	return ep.Name + "-routing"
}

// objectMeta is the metadata of an owned object: its name, the endpoint's
// namespace, labels, and a controller reference to the endpoint.
func objectMeta(ep *v1alpha1.LLMEndpoint, name, role, app string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       ep.Namespace,
		Labels:          objectLabels(ep, role, app),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ep, v1alpha1.GroupVersion.WithKind("LLMEndpoint"))},
	}
}
