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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
)

// In spec.router.mode InferencePool a Gateway is the front door. The
// operator creates an InferencePool selecting the endpoint's vLLM pods,
// whose endpoint picker is the routers' Service <name>-epp; the routers
// serve the Endpoint Picker Protocol (Envoy ext_proc over gRPC) there and
// no client-facing proxy, and the Gateway sends each request straight to
// the vLLM pod they pick.
//
// Every router replica serves the protocol and is Ready, not only the
// elected picker: a replica that is not the picker asks it over the pick
// API, as its proxy would (sidecar/router/epp), so there is still one
// decider and one set of counts. Making only the leader Ready would turn
// each re-election into an outage the length of the Lease expiry plus a
// readiness period plus endpoint propagation, refused by a FailClose
// Gateway; with every replica Ready, the replicas route by their fallback
// for those few seconds and the Gateway's open ext_proc streams survive.

// +kubebuilder:rbac:groups=inference.networking.k8s.io,resources=inferencepools,verbs=get;list;watch;create;patch;delete

// routerEPPPort is the routers' Endpoint Picker Protocol port, in the pod
// and on the picker Service: 9002, the port a Gateway assumes for a picker
// and the Inference Extension's own picker listens on.
const routerEPPPort = inferencepool.DefaultPickerPort

// inferencePoolRecheck is how often an endpoint in mode InferencePool
// looks again for the InferencePool API while it is missing: installing
// the CRD then takes effect within two of it (a miss is remembered for
// one, see inferencePoolServed), without restarting the operator. Each
// look is a discovery request (the RESTMapper caches only what it finds),
// so 30 s bounds the cost at 2 requests a minute for the operator,
// against a wait of at most a minute after the CRD's one-time install.
const inferencePoolRecheck = 30 * time.Second

// pickerServiceName is the routers' Service in mode InferencePool, the
// InferencePool's endpointPickerRef.
func pickerServiceName(ep *v1alpha1.LLMEndpoint) string { return ep.Name + "-epp" }

// inferencePoolName is the endpoint's InferencePool: the endpoint's name,
// which HTTPRoutes name as their backendRef.
func inferencePoolName(ep *v1alpha1.LLMEndpoint) string { return ep.Name }

func inferencePoolMode(ep *v1alpha1.LLMEndpoint) bool {
	return v1alpha1.RouterModeOf(ep) == v1alpha1.RouterModeInferencePool
}

// buildInferencePool is the endpoint's InferencePool: its vLLM pods on
// vLLM's port, picked by the routers' picker Service.
func buildInferencePool(ep *v1alpha1.LLMEndpoint) *inferencepool.InferencePool {
	return &inferencepool.InferencePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: inferencepool.GroupVersion.String(), Kind: inferencepool.Kind},
		ObjectMeta: objectMeta(ep, inferencePoolName(ep), roleVLLM, "vllm"),
		Spec: inferencepool.Spec{
			Selector:    inferencepool.LabelSelector{MatchLabels: selectorLabels(ep, roleVLLM)},
			TargetPorts: []inferencepool.Port{{Number: vllmPort}},
			EndpointPickerRef: inferencepool.EndpointPickerRef{
				Kind:        "Service",
				Name:        pickerServiceName(ep),
				Port:        &inferencepool.Port{Number: routerEPPPort},
				FailureMode: string(v1alpha1.PickerFailureMode(ep)),
			},
		},
	}
}

// buildPickerService is the Service the Gateway calls the picker on. Its
// appProtocol tells the Gateway to speak HTTP/2 without TLS, which gRPC
// (ext_proc) needs; kubernetes.io/h2c is the standard name for it.
func buildPickerService(ep *v1alpha1.LLMEndpoint) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(ep, pickerServiceName(ep), roleRouter, "warmroute-router"),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorLabels(ep, roleRouter),
			Ports: []corev1.ServicePort{{
				Name: "grpc-epp", Port: routerEPPPort, TargetPort: intstr.FromString("epp"),
				Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("kubernetes.io/h2c"),
			}},
		},
	}
}

// inferencePoolServed is whether the API server serves InferencePools
// (lateAPI.served).
func (r *LLMEndpointReconciler) inferencePoolServed() (bool, error) {
	return r.pools.served(r.RESTMapper(), r.poolRecheck())
}

// inferencePoolResult is what reconcileInferencePool found and did.
type inferencePoolResult struct {
	// served: the API server serves InferencePools (prune looks through
	// them only then).
	served bool
	// condition is InferencePoolReady; its Type is empty in mode
	// Standalone.
	condition metav1.Condition
	// recheck is, while the API is missing in mode InferencePool, when to
	// look for it again.
	recheck time.Duration
}

// reconcileInferencePool applies the endpoint's InferencePool in mode
// InferencePool. It asks whether the API is served in every mode: pruning
// a pool left by mode InferencePool needs to know. That is cheap once the
// CRD is installed (the RESTMapper keeps it); while it is missing, one
// discovery request per recheck period for the whole operator.
func (r *LLMEndpointReconciler) reconcileInferencePool(ctx context.Context, ep *v1alpha1.LLMEndpoint) (inferencePoolResult, error) {
	var res inferencePoolResult
	served, err := r.inferencePoolServed()
	if !inferencePoolMode(ep) {
		res.served = served
		return res, err
	}
	res.condition = metav1.Condition{Type: v1alpha1.ConditionInferencePoolReady, Status: metav1.ConditionFalse}
	switch {
	case err != nil:
		res.condition.Status, res.condition.Reason, res.condition.Message = metav1.ConditionUnknown, v1alpha1.ReasonInferencePoolFailed, truncate(err.Error(), 1024)
		return res, err
	case !served:
		res.condition.Reason = v1alpha1.ReasonInferencePoolCRDMissing
		res.condition.Message = "spec.router.mode is InferencePool but the API server does not serve inference.networking.k8s.io/v1 InferencePools: install the Gateway API Inference Extension's CRDs (v1.0 or later), and a Gateway that implements them"
		res.recheck = r.poolRecheck()
		return res, nil
	}
	res.served = true
	if err := r.pools.watch(); err != nil {
		// The condition's reason may not be empty: the status write
		// would be refused, and the error lost with it.
		res.condition.Reason, res.condition.Message = v1alpha1.ReasonInferencePoolFailed, truncate(err.Error(), 1024)
		return res, err
	}
	if err := r.applyInOrder(ctx, ep, buildInferencePool(ep)); err != nil {
		res.condition.Reason, res.condition.Message = v1alpha1.ReasonInferencePoolFailed, truncate(err.Error(), 1024)
		return res, err
	}
	res.condition.Status, res.condition.Reason = metav1.ConditionTrue, v1alpha1.ReasonInferencePoolApplied
	res.condition.Message = fmt.Sprintf("InferencePool %s selects the vLLM pods on port %d; its endpoint picker is Service %s port %d (%s)",
		inferencePoolName(ep), vllmPort, pickerServiceName(ep), routerEPPPort, v1alpha1.PickerFailureMode(ep))
	return res, nil
}

func (r *LLMEndpointReconciler) poolRecheck() time.Duration {
	if r.inferencePoolRecheck > 0 {
		return r.inferencePoolRecheck
	}
	return inferencePoolRecheck
}

// lateAPI is an API of another project whose CRD may be installed after
// the operator starts, or never: its watch starts the first time a
// reconcile finds it served. It cannot start before (an informer of a kind
// the API server does not serve never syncs).
type lateAPI struct {
	gvk schema.GroupVersionKind
	mu  sync.Mutex
	// started: the watch runs.
	started bool
	// start starts the watch; nil before setup.
	start func() error
	// absentUntil: the API was missing at the last look, which holds
	// until then (see served).
	absentUntil time.Time
}

// served is whether the API server serves the API. The manager's
// RESTMapper asks discovery again for a group it does not know, so a CRD
// installed after the operator started is found.
//
// A missing API is remembered for recheck: the RESTMapper asks discovery
// on every miss, so without it each reconcile of every endpoint would cost
// a discovery request on a cluster without the CRD, the usual case in
// mode Standalone.
func (a *lateAPI) served(mapper apimeta.RESTMapper, recheck time.Duration) (bool, error) {
	a.mu.Lock()
	absent := time.Now().Before(a.absentUntil)
	a.mu.Unlock()
	if absent {
		return false, nil
	}
	_, err := mapper.RESTMapping(a.gvk.GroupKind(), a.gvk.Version)
	switch {
	case apimeta.IsNoMatchError(err):
		a.mu.Lock()
		a.absentUntil = time.Now().Add(recheck)
		a.mu.Unlock()
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up the %s API: %w", a.gvk.Kind, err)
	}
	return true, nil
}

// watch starts the watch the first time the API is found.
func (a *lateAPI) watch() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.start == nil {
		return nil
	}
	if err := a.start(); err != nil {
		return fmt.Errorf("watch %ss: %w", a.gvk.Kind, err)
	}
	a.started = true
	return nil
}

// prunableKinds are the kinds prune looks through: the owned kinds, and
// InferencePools when the API is served.
func prunableKinds(poolServed bool) []ownedKind {
	if !poolServed {
		return ownedKinds
	}
	return append(ownedKinds[:len(ownedKinds):len(ownedKinds)], ownedKind{
		inferencepool.GroupVersion.WithKind(inferencepool.Kind),
		func() client.Object { return &inferencepool.InferencePool{} },
		func() client.ObjectList { return &inferencepool.InferencePoolList{} },
	})
}
