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

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// buildPodDisruptionBudget lets voluntary disruptions (a node drain, a
// cluster autoscaler's scale-down) evict maxUnavailable pods of a role at a time, so
// that a drain never takes the whole fleet (or every router) at once and
// each evicted instance drains its requests while the others serve. It
// counts unavailable pods rather than requiring a number available, so it
// follows replica changes and never blocks a drain of an endpoint scaled
// to one.
func buildPodDisruptionBudget(ep *v1alpha1.LLMEndpoint, name, role, app string, maxUnavailable int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(ep, name, role, app),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(ep, role)},
			// An instance that never became ready (a failing model load)
			// may be evicted whatever the budget says: it serves nothing,
			// and keeping it would block the drain.
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// reconcileDisruptionBudgets applies the budgets of the instances and of
// the routers.
func (r *LLMEndpointReconciler) reconcileDisruptionBudgets(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	return r.applyInOrder(ctx, ep,
		buildPodDisruptionBudget(ep, vllmName(ep), roleVLLM, "vllm", vllmMaxUnavailable(ep)),
		buildPodDisruptionBudget(ep, routerName(ep), roleRouter, "warmroute-router", 1),
	)
}

// vllmMaxUnavailable is how many instances a drain may evict at once: as
// many as a rollout may stop (spec.rollout.maxUnavailable, a percentage
// rounded down as the Deployment does), and at least one, since a budget
// of none would block every drain.
func vllmMaxUnavailable(ep *v1alpha1.LLMEndpoint) int32 {
	mu := v1alpha1.MaxUnavailable(ep)
	n, err := intstr.GetScaledValueFromIntOrPercent(&mu, int(v1alpha1.Replicas(ep)), false)
	if err != nil {
		return 1 // the CRD admits no other form
	}
	return int32(max(n, 1))
}
