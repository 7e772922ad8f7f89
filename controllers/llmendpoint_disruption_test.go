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
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestBuildPodDisruptionBudgets(t *testing.T) {
	ep := newEndpoint()
	for _, tt := range []struct{ name, role string }{{vllmName(ep), roleVLLM}, {routerName(ep), roleRouter}} {
		pdb := buildPodDisruptionBudget(ep, tt.name, tt.role, "x", 1)
		if pdb.Name != tt.name || len(pdb.OwnerReferences) != 1 || !*pdb.OwnerReferences[0].Controller {
			t.Errorf("%s: name %q owners %+v", tt.role, pdb.Name, pdb.OwnerReferences)
		}
		// Exactly the pods of the role's Deployment: one at a time may go.
		if diff := cmp.Diff(&metav1.LabelSelector{MatchLabels: selectorLabels(ep, tt.role)}, pdb.Spec.Selector); diff != "" {
			t.Errorf("%s selector (-want +got):\n%s", tt.role, diff)
		}
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
			t.Errorf("%s: maxUnavailable %v minAvailable %v, want 1 and unset", tt.role, pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
		}
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
			t.Errorf("%s: an unready pod could block a node drain", tt.role)
		}
	}
}

// The instances' budget lets a drain take as many instances as a rollout
// may stop, and never none.
func TestVLLMDisruptionBudgetAgreesWithRollout(t *testing.T) {
	for _, tt := range []struct {
		name           string
		replicas       int32
		maxSurge       *intstr.IntOrString
		maxUnavailable *intstr.IntOrString
		want           int32
	}{
		{"defaults", 4, nil, nil, 1},
		{"two at a time", 4, nil, ptr.To(intstr.FromInt32(2)), 2},
		{"a quarter of 8", 8, nil, ptr.To(intstr.FromString("25%")), 2},
		{"a quarter of 3 rounds down to none, the budget keeps one", 3, ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromString("25%")), 1},
		{"surge only", 4, ptr.To(intstr.FromInt32(1)), ptr.To(intstr.FromInt32(0)), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Replicas = ptr.To(tt.replicas)
				ep.Spec.Rollout = v1alpha1.RolloutSpec{MaxSurge: tt.maxSurge, MaxUnavailable: tt.maxUnavailable}
			})
			if got := vllmMaxUnavailable(ep); got != tt.want {
				t.Errorf("budget maxUnavailable %d, want %d", got, tt.want)
			}
			d := buildVLLMDeployment(ep, testOptions)
			ru := d.Spec.Strategy.RollingUpdate
			if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil {
				t.Fatalf("strategy %+v", d.Spec.Strategy)
			}
			// What the Deployment controller resolves (maxUnavailable
			// rounds down, maxSurge up).
			surge, _ := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, int(tt.replicas), true)
			unavailable, _ := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, int(tt.replicas), false)
			if tt.maxSurge == nil && surge != 0 {
				t.Errorf("maxSurge %v resolves to %d: a rollout needs a spare GPU", ru.MaxSurge, surge)
			}
			if unavailable > 0 && int32(unavailable) != tt.want {
				t.Errorf("a rollout stops %d instances, a drain %d", unavailable, tt.want)
			}
		})
	}
}

func TestRouterReplicasSpreadOverNodesAndZones(t *testing.T) {
	d := buildRouterDeployment(newEndpoint(), testOptions)
	var keys []string
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		keys = append(keys, c.TopologyKey)
	}
	if diff := cmp.Diff([]string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}, keys); diff != "" {
		t.Errorf("spread keys (-want +got):\n%s", diff)
	}
}
