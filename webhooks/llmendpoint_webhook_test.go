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

package webhooks

import (
	"testing"

	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestDerivedDefaults(t *testing.T) {
	spec := func(replicas, gpus *int32) *servingv1alpha1.LLMEndpoint {
		return &servingv1alpha1.LLMEndpoint{Spec: servingv1alpha1.LLMEndpointSpec{
			Replicas: replicas,
			Model:    servingv1alpha1.ModelSpec{GPUs: gpus},
		}}
	}
	tests := []struct {
		name               string
		e                  *servingv1alpha1.LLMEndpoint
		wantTP             *int32
		wantConcurrency    int32
		wantRouterReplicas int32
	}{
		{"CRD defaults (2 instances, 1 GPU)", spec(nil, nil), ptr.To[int32](1), 10, 2},
		{"CPU", spec(ptr.To[int32](1), ptr.To[int32](0)), nil, 4, 2},
		{"scaled to zero", spec(ptr.To[int32](0), ptr.To[int32](2)), ptr.To[int32](2), 20, 2},
		{"16 instances still 2 routers", spec(ptr.To[int32](16), ptr.To[int32](1)), ptr.To[int32](1), 10, 2},
		{"17 instances, 3 routers", spec(ptr.To[int32](17), ptr.To[int32](1)), ptr.To[int32](1), 10, 3},
		{"largest fleet", spec(ptr.To[int32](512), ptr.To[int32](16)), ptr.To[int32](16), 160, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultTensorParallelSize(tt.e); !equalPtr(got, tt.wantTP) {
				t.Errorf("tensorParallelSize = %v, want %v", deref(got), deref(tt.wantTP))
			}
			if got := *DefaultConcurrencyThreshold(tt.e); got != tt.wantConcurrency {
				t.Errorf("concurrencyThreshold = %d, want %d", got, tt.wantConcurrency)
			}
			if got := *DefaultRouterReplicas(tt.e); got != tt.wantRouterReplicas {
				t.Errorf("router replicas = %d, want %d", got, tt.wantRouterReplicas)
			}
		})
	}
}

func TestApplyDerivedDefaultsOnUpdate(t *testing.T) {
	withGPUs := func(gpus, tp int32) *servingv1alpha1.LLMEndpoint {
		e := &servingv1alpha1.LLMEndpoint{}
		e.Spec.Model.GPUs = ptr.To(gpus)
		e.Spec.Model.TensorParallelSize = ptr.To(tp)
		return e
	}
	tests := []struct {
		name   string
		old    *servingv1alpha1.LLMEndpoint
		new    *servingv1alpha1.LLMEndpoint
		wantTP *int32
	}{
		{"defaulted value follows gpus", withGPUs(4, 4), withGPUs(2, 4), ptr.To[int32](2)},
		{"chosen value stays", withGPUs(4, 2), withGPUs(8, 2), ptr.To[int32](2)},
		{"value changed in this update stays", withGPUs(4, 4), withGPUs(8, 2), ptr.To[int32](2)},
		{"to CPU clears it", withGPUs(2, 2), withGPUs(0, 2), nil},
		{"create fills only unset fields", nil, withGPUs(8, 2), ptr.To[int32](2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applyDerivedDefaults(tt.old, tt.new)
			if got := tt.new.Spec.Model.TensorParallelSize; !equalPtr(got, tt.wantTP) {
				t.Errorf("tensorParallelSize = %v, want %v", deref(got), deref(tt.wantTP))
			}
		})
	}
}

func TestPVCClaim(t *testing.T) {
	tests := []struct {
		uri, claim string
		ok         bool
	}{
		{"pvc://models/llama", "models", true},
		{"pvc://models", "models", true},
		{"pvc:///x", "", false},
		{"meta-llama/Llama-3.1-8B", "", false},
		{"/models/llama", "", false},
	}
	for _, tt := range tests {
		if claim, ok := pvcClaim(tt.uri); claim != tt.claim || ok != tt.ok {
			t.Errorf("pvcClaim(%q) = %q, %v; want %q, %v", tt.uri, claim, ok, tt.claim, tt.ok)
		}
	}
}

func deref(p *int32) any {
	if p == nil {
		return "nil"
	}
	return *p
}
