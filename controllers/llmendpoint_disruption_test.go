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
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBuildPodDisruptionBudgets(t *testing.T) {
	ep := newEndpoint()
	for _, tt := range []struct{ name, role string }{{vllmName(ep), roleVLLM}, {routerName(ep), roleRouter}} {
		pdb := buildPodDisruptionBudget(ep, tt.name, tt.role, "x")
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
