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
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestBuildRoutingDocument(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		ep            *v1alpha1.LLMEndpoint
		pods          []corev1.Pod
		wantInstances []routing.Instance
		wantAdapters  []routing.Adapter
		wantStrategy  routing.Strategy
		wantPrefix    int
		wantThreshold int
	}{{
		name: "only ready, non-terminating pods with an IP, ordered by name",
		ep:   newEndpoint(),
		pods: []corev1.Pod{
			newPod("chat-vllm-c", "10.0.0.3", podReady, now),
			newPod("chat-vllm-a", "10.0.0.1", podReady, now),
			newPod("chat-vllm-b", "10.0.0.2", podUnready, now),
			newPod("chat-vllm-d", "10.0.0.4", podTerminating, now),
			newPod("chat-vllm-e", "", podNoIP, now),
			newPod("chat-vllm-f", "fd00::6", podReady, now),
		},
		wantInstances: []routing.Instance{
			{ID: "chat-vllm-a", Address: "10.0.0.1:8000"},
			{ID: "chat-vllm-c", Address: "10.0.0.3:8000"},
			{ID: "chat-vllm-f", Address: "[fd00::6]:8000"},
		},
		wantStrategy: routing.StrategyPrefixAware, wantPrefix: 4096, wantThreshold: 10,
	}, {
		name:          "no pods",
		ep:            newEndpoint(),
		wantInstances: []routing.Instance{},
		wantStrategy:  routing.StrategyPrefixAware, wantPrefix: 4096, wantThreshold: 10,
	}, {
		name: "routing settings and adapters",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing = v1alpha1.RoutingSpec{
				Strategy: v1alpha1.RoutingStrategyLeastOutstandingRequests,
				PrefixAware: v1alpha1.PrefixAwareSpec{
					PrefixLength: ptr.To[int32](16384), ConcurrencyThreshold: ptr.To[int32](3),
				},
			}
			ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql", Replicas: ptr.To[int32](1)}}
		}),
		pods: []corev1.Pod{
			newPod("chat-vllm-b", "10.0.0.2", podReady, now),
			newPod("chat-vllm-a", "10.0.0.1", podReady, now),
		},
		wantInstances: []routing.Instance{{ID: "chat-vllm-a", Address: "10.0.0.1:8000"}, {ID: "chat-vllm-b", Address: "10.0.0.2:8000"}},
		// Placed on one instance by hash; nothing reports it loaded yet.
		wantAdapters: []routing.Adapter{{Name: "sql", URI: "org/sql", Desired: []string{"chat-vllm-a"}}},
		wantStrategy: routing.StrategyLeastOutstandingRequests, wantPrefix: 16384, wantThreshold: 3,
	}, {
		name: "unset routing gets the defaults",
		ep: newEndpoint(func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Routing = v1alpha1.RoutingSpec{}
		}),
		wantInstances: []routing.Instance{},
		wantStrategy:  routing.StrategyPrefixAware, wantPrefix: routing.DefaultPrefixLength, wantThreshold: routing.DefaultConcurrencyThresh,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := buildRoutingDocument(tt.ep, tt.pods, placeAdapters(tt.ep, tt.pods, nil), now)
			if err := doc.Validate(); err != nil {
				t.Fatalf("the router would refuse the document: %v", err)
			}
			if doc.APIVersion != routing.APIVersion || doc.Kind != routing.Kind || doc.Endpoint != "team/chat" || doc.Generation != 3 || doc.Model != "llama" {
				t.Errorf("header %+v", doc)
			}
			if diff := cmp.Diff(tt.wantInstances, doc.Instances); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantAdapters, doc.Adapters); diff != "" {
				t.Errorf("adapters (-want +got):\n%s", diff)
			}
			if doc.Strategy != tt.wantStrategy || doc.PrefixAware.PrefixLength != tt.wantPrefix || doc.PrefixAware.ConcurrencyThreshold != tt.wantThreshold {
				t.Errorf("strategy %s prefixAware %+v", doc.Strategy, doc.PrefixAware)
			}
			if doc.HashSeed == 0 {
				t.Error("no hash seed")
			}
		})
	}
}

// TestRoutingDocumentIsStable: the same endpoint and pods, in any order,
// give the same bytes, so an unchanged fleet writes nothing; and the seed
// is the same across operator restarts but differs between endpoints.
func TestRoutingDocumentIsStable(t *testing.T) {
	now := time.Now()
	pods := []corev1.Pod{
		newPod("chat-vllm-a", "10.0.0.1", podReady, now),
		newPod("chat-vllm-b", "10.0.0.2", podReady, now),
		newPod("chat-vllm-c", "10.0.0.3", podUnready, now),
	}
	reversed := slices.Clone(pods)
	slices.Reverse(reversed)
	encode := func(pods []corev1.Pod) []byte {
		doc := buildRoutingDocument(newEndpoint(), pods, nil, time.Now())
		data, err := doc.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first, second := encode(pods), encode(reversed)
	if !bytes.Equal(first, second) {
		t.Errorf("pod order changed the document:\n%s\n%s", first, second)
	}
	decoded, err := routing.Decode(first)
	if err != nil {
		t.Fatalf("router cannot decode the document: %v", err)
	}
	if len(decoded.Instances) != 2 {
		t.Errorf("decoded %d instances", len(decoded.Instances))
	}
	other := newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.UID = types.UID("another") })
	seed, again := hashSeed(newEndpoint()), hashSeed(newEndpoint())
	if seed != again || seed == hashSeed(other) {
		t.Error("hash seed is not a function of the endpoint's UID")
	}
}

func TestBuildRoutingConfigMap(t *testing.T) {
	ep := newEndpoint()
	cm := buildRoutingConfigMap(ep, []byte("{}\n"))
	if cm.Name != routingConfigMapName(ep) || cm.Data[routing.ConfigMapKey] != "{}\n" || len(cm.Data) != 1 {
		t.Errorf("configmap %s %v", cm.Name, cm.Data)
	}
	if cm.Labels[LabelEndpoint] != "chat" {
		t.Errorf("labels %v lack the endpoint (the operator caches only labelled ConfigMaps)", cm.Labels)
	}
}

func TestInstanceChanges(t *testing.T) {
	old := routing.Document{APIVersion: routing.APIVersion, Kind: routing.Kind, Instances: []routing.Instance{
		{ID: "a", Address: "10.0.0.1:8000"}, {ID: "b", Address: "10.0.0.2:8000"},
	}}
	old.Default()
	data, err := old.Encode()
	if err != nil {
		t.Fatal(err)
	}
	prev := buildRoutingConfigMap(newEndpoint(), data)
	added, removed := instanceChanges(prev, []routing.Instance{{ID: "b"}, {ID: "c"}})
	if !slices.Equal(added, []string{"c"}) || !slices.Equal(removed, []string{"a"}) {
		t.Errorf("added %v removed %v", added, removed)
	}
	// An instance that starts draining left routing then; leaving the
	// document later changes nothing more.
	old.Instances[1].Draining = true
	if data, err = old.Encode(); err != nil {
		t.Fatal(err)
	}
	added, removed = instanceChanges(buildRoutingConfigMap(newEndpoint(), data), []routing.Instance{{ID: "a"}})
	if added != nil || removed != nil {
		t.Errorf("after a drain: added %v removed %v, want no change", added, removed)
	}
	added, removed = instanceChanges(nil, []routing.Instance{{ID: "a"}})
	if !slices.Equal(added, []string{"a"}) || removed != nil {
		t.Errorf("from nothing: added %v removed %v", added, removed)
	}
}
