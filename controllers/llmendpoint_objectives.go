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
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
)

// In mode InferencePool a request may name an InferenceObjective (the
// Gateway passes its x-gateway-inference-objective header to the picker),
// whose priority it then asks for under flow control. The operator reads
// the objectives that name the endpoint's pool and writes their
// priorities into the routing document, so the routers never call the API
// server. The InferenceObjective is alpha upstream and its CRD optional:
// while the API server does not serve it, endpoints work as without it.

// +kubebuilder:rbac:groups=inference.networking.x-k8s.io,resources=inferenceobjectives,verbs=get;list;watch

// objectivePriorities are, in mode InferencePool with flow control, the
// priorities of the InferenceObjectives that name the endpoint's pool, by
// name; nil otherwise, and while the API is not served.
func (r *LLMEndpointReconciler) objectivePriorities(ctx context.Context, ep *v1alpha1.LLMEndpoint) (map[string]int, error) {
	if !inferencePoolMode(ep) || ep.Spec.Router.FlowControl == nil {
		return nil, nil
	}
	served, err := r.objectives.served(r.RESTMapper(), r.poolRecheck())
	switch {
	case err != nil:
		return nil, err
	case !served:
		r.objectivesMissing.Do(func() {
			logf.FromContext(ctx).Info("the API server does not serve InferenceObjectives: requests' objectives set no priority",
				"apiVersion", inferencepool.ObjectiveGroupVersion.String())
		})
		return nil, nil
	}
	if err := r.objectives.watch(); err != nil {
		return nil, err
	}
	var list inferencepool.InferenceObjectiveList
	if err := r.List(ctx, &list, client.InNamespace(ep.Namespace)); err != nil {
		return nil, fmt.Errorf("list InferenceObjectives: %w", err)
	}
	return buildObjectivePriorities(ep, list.Items), nil
}

// buildObjectivePriorities is the priorities of the objectives that name
// the endpoint's pool, by name, as flowControl.objectives holds them. An
// objective without a priority asks for none and is left out. The
// Inference Extension bounds neither the priority nor the number of
// objectives, and the routers refuse a whole document out of their bounds,
// so one objective cannot stop an endpoint's routing: a priority is
// clamped to the tenants' range (which keeps its order against every
// tenant's), and past routing.MaxFlowObjectives the last by name are left
// out.
func buildObjectivePriorities(ep *v1alpha1.LLMEndpoint, objectives []inferencepool.InferenceObjective) map[string]int {
	var names []string
	prio := map[string]int{}
	for _, o := range objectives {
		if o.Namespace != ep.Namespace || o.Spec.Priority == nil || !o.Spec.PoolRef.IsPool(inferencePoolName(ep)) {
			continue
		}
		names = append(names, o.Name)
		prio[o.Name] = min(max(*o.Spec.Priority, routing.MinFlowPriority), routing.MaxFlowPriority)
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	for _, name := range names[min(len(names), routing.MaxFlowObjectives):] {
		delete(prio, name)
	}
	return prio
}

// objectiveToEndpoint maps an InferenceObjective to the endpoint whose
// pool it names (inferencePoolName is the endpoint's name). On an update
// the handler maps the old object too, so an objective moved to another
// pool leaves the first one's document.
func objectiveToEndpoint(_ context.Context, o *inferencepool.InferenceObjective) []reconcile.Request {
	ref := o.Spec.PoolRef
	if !ref.IsPool(ref.Name) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.Namespace, Name: ref.Name}}}
}
