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
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
)

func testObjective(ns, name string, priority *int, ref inferencepool.PoolObjectReference) inferencepool.InferenceObjective {
	return inferencepool.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: inferencepool.ObjectiveSpec{Priority: priority, PoolRef: ref}}
}

// TestBuildObjectivePriorities: the document carries the priorities of the
// objectives naming the endpoint's pool, and only a document the routers
// take, whatever the objectives say.
func TestBuildObjectivePriorities(t *testing.T) {
	ep := newEndpoint(inInferencePoolMode)
	pool := inferencepool.PoolObjectReference{Name: inferencePoolName(ep)}
	for _, tc := range []struct {
		name       string
		objectives []inferencepool.InferenceObjective
		want       map[string]int
	}{
		{"none: no map", nil, nil},
		{"this pool's, group and kind defaulted", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "batch", ptr.To(-50), pool)}, map[string]int{"batch": -50}},
		{"group and kind spelled out", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "batch", ptr.To(-50),
			inferencepool.PoolObjectReference{Group: "inference.networking.k8s.io", Kind: "InferencePool", Name: pool.Name})}, map[string]int{"batch": -50}},
		{"another pool's", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "b", ptr.To(1), inferencepool.PoolObjectReference{Name: "other"})}, nil},
		{"another kind of the same name", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "b", ptr.To(1),
			inferencepool.PoolObjectReference{Kind: "Service", Name: pool.Name})}, nil},
		{"the old, x-k8s.io InferencePool", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "b", ptr.To(1),
			inferencepool.PoolObjectReference{Group: "inference.networking.x-k8s.io", Name: pool.Name})}, nil},
		{"another namespace's", []inferencepool.InferenceObjective{testObjective("elsewhere", "b", ptr.To(1), pool)}, nil},
		{"no priority: asks for none", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "b", nil, pool)}, nil},
		{"a priority of 0 is one", []inferencepool.InferenceObjective{testObjective(ep.Namespace, "b", ptr.To(0), pool)}, map[string]int{"b": 0}},
		{"priorities beyond the tenants' range are clamped to it", []inferencepool.InferenceObjective{
			testObjective(ep.Namespace, "low", ptr.To(-5000), pool), testObjective(ep.Namespace, "high", ptr.To(5000), pool)},
			map[string]int{"low": routing.MinFlowPriority, "high": routing.MaxFlowPriority}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildObjectivePriorities(ep, tc.objectives)
			if !cmp.Equal(got, tc.want) {
				t.Fatalf("objectives %v, want %v", got, tc.want)
			}
			fc := buildFlowControl(&v1alpha1.FlowControl{})
			fc.Objectives = got
			if err := fc.Validate("flowControl"); err != nil {
				t.Fatalf("the routers would refuse it: %v", err)
			}
		})
	}

	var many []inferencepool.InferenceObjective
	for i := range routing.MaxFlowObjectives + 1 {
		many = append(many, testObjective(ep.Namespace, fmt.Sprintf("o-%04d", i), ptr.To(-1), pool))
	}
	got := buildObjectivePriorities(ep, many)
	if _, last := got[fmt.Sprintf("o-%04d", routing.MaxFlowObjectives)]; len(got) != routing.MaxFlowObjectives || last {
		t.Fatalf("%d objectives kept (the last by name: %v), want the first %d by name", len(got), last, routing.MaxFlowObjectives)
	}
}

// TestObjectiveToEndpoint: an objective's events reach the endpoint whose
// pool it names, in its namespace, and no other.
func TestObjectiveToEndpoint(t *testing.T) {
	o := testObjective("ns", "batch", ptr.To(-1), inferencepool.PoolObjectReference{Name: "chat"})
	reqs := objectiveToEndpoint(context.Background(), &o)
	if len(reqs) != 1 || reqs[0].Namespace != "ns" || reqs[0].Name != "chat" {
		t.Fatalf("requests %v, want ns/chat", reqs)
	}
	o.Spec.PoolRef.Kind = "Service"
	if reqs := objectiveToEndpoint(context.Background(), &o); len(reqs) != 0 {
		t.Fatalf("an objective naming a Service: requests %v, want none", reqs)
	}
}
