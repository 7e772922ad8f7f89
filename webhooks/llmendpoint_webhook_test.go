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
	"context"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// TestWebhookAndControllerAgree: the defaults the webhook writes are the
// values the controller uses for an unset field, so an endpoint behaves the
// same with the webhook off (make run).
func TestWebhookAndControllerAgree(t *testing.T) {
	spec := func(replicas, gpus *int32) *servingv1alpha1.LLMEndpoint {
		return &servingv1alpha1.LLMEndpoint{Spec: servingv1alpha1.LLMEndpointSpec{
			Replicas: replicas,
			Model:    servingv1alpha1.ModelSpec{GPUs: gpus},
		}}
	}
	for _, unset := range []*servingv1alpha1.LLMEndpoint{
		spec(nil, nil),
		spec(ptr.To[int32](1), ptr.To[int32](0)),
		spec(ptr.To[int32](0), ptr.To[int32](2)),
		spec(ptr.To[int32](17), ptr.To[int32](1)),
		spec(ptr.To[int32](512), ptr.To[int32](16)),
	} {
		defaulted := unset.DeepCopy()
		applyDerivedDefaults(nil, defaulted)
		// The controller's view of each: the defaulted object as written,
		// the unset one through the API's fallbacks.
		for _, f := range []struct {
			name string
			get  func(*servingv1alpha1.LLMEndpoint) int32
		}{
			{"concurrencyThreshold", servingv1alpha1.ConcurrencyThreshold},
			{"router replicas", servingv1alpha1.RouterReplicas},
			{"tensorParallelSize", servingv1alpha1.TensorParallelSize},
		} {
			if a, b := f.get(unset), f.get(defaulted); a != b {
				t.Errorf("replicas %v gpus %v: %s is %d without the webhook, %d with it", deref(unset.Spec.Replicas), deref(unset.Spec.Model.GPUs), f.name, a, b)
			}
		}
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

func deref(p *int32) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func TestValidateSpecRefusals(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*servingv1alpha1.LLMEndpoint)
		want   string // in the error; "" for none
	}{
		{"valid", func(*servingv1alpha1.LLMEndpoint) {}, ""},
		{"adapter path escaping its claim", func(e *servingv1alpha1.LLMEndpoint) {
			e.Spec.LoRAAdapters = []servingv1alpha1.LoRAAdapter{{Name: "a", URI: "pvc://adapters/../x"}}
		}, "spec.loraAdapters[0].uri"},
		{"trusted header, routerFrom empty", func(e *servingv1alpha1.LLMEndpoint) {
			e.Spec.Router.Auth = &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthTrustedHeader, TrustedHeader: &servingv1alpha1.TrustedHeaderAuth{Name: "X-T"}}
		}, "spec.networkPolicy.routerFrom"},
		{"trusted header, routerFrom set", func(e *servingv1alpha1.LLMEndpoint) {
			e.Spec.Router.Auth = &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthTrustedHeader, TrustedHeader: &servingv1alpha1.TrustedHeaderAuth{Name: "X-T"}}
			e.Spec.NetworkPolicy.RouterFrom = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
		}, ""},
		{"trusted header, NetworkPolicies off (warned instead)", func(e *servingv1alpha1.LLMEndpoint) {
			e.Spec.Router.Auth = &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthTrustedHeader, TrustedHeader: &servingv1alpha1.TrustedHeaderAuth{Name: "X-T"}}
			e.Spec.NetworkPolicy.Enabled = ptr.To(false)
		}, ""},
		{"model claim name longer than a PVC's", func(e *servingv1alpha1.LLMEndpoint) {
			e.Spec.Model.URI = "pvc://" + strings.Repeat("m", 254) + "/llama"
		}, "spec.model.uri"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &servingv1alpha1.LLMEndpoint{}
			e.Spec.Model.Name, e.Spec.Model.URI = "m", "org/m"
			tt.mutate(e)
			errs := validateSpec(e)
			got := errs.ToAggregate()
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("refused: %v", got)
			case tt.want != "" && (got == nil || !strings.Contains(got.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", got, tt.want)
			}
		})
	}
}

func TestValidateNamespace(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		watched   []string
		wantErr   bool
		wantWarn  string // in a warning; "" for none about namespaces
	}{
		{"a namespace of its own", "team-a", nil, false, ""},
		{"kube-system, whose Leases elect the control plane", "kube-system", nil, true, ""},
		{"kube-node-lease, the nodes' heartbeats", "kube-node-lease", nil, true, ""},
		{"kube-public", "kube-public", nil, true, ""},
		{"kube-system even when watched", "kube-system", []string{"kube-system"}, true, ""},
		{"a watched namespace", "team-a", []string{"team-a", "team-b"}, false, ""},
		{"a namespace no operator watches", "team-c", []string{"team-a", "team-b"}, false, "nothing will reconcile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &servingv1alpha1.LLMEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: tt.namespace, Name: "chat"}}
			e.Spec.Model.Name, e.Spec.Model.URI = "m", "org/m"
			v := &LLMEndpointValidator{WatchNamespaces: tt.watched}
			warnings, err := v.ValidateCreate(context.Background(), e)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "metadata.namespace") {
				t.Errorf("error %v does not name metadata.namespace", err)
			}
			warned := slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "nothing will reconcile") })
			if warned != (tt.wantWarn != "") {
				t.Errorf("warnings %q, want one containing %q: %v", warnings, tt.wantWarn, tt.wantWarn != "")
			}
		})
	}
}
