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
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestInferencePoolNetworkBoundary(t *testing.T) {
	keys := &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthAPIKeys, APIKeys: &servingv1alpha1.APIKeysAuth{SecretName: "k"}}
	gateway := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "envoy-gateway-system"}}}}
	for _, tc := range []struct {
		name       string
		mode       servingv1alpha1.RouterMode
		auth       *servingv1alpha1.RouterAuth
		from       []networkingv1.NetworkPolicyPeer
		policiesOn bool
		wantErr    bool
		wantWarn   bool
	}{
		{"standalone, open", servingv1alpha1.RouterModeStandalone, keys, nil, true, false, false},
		{"pool, auth, open", servingv1alpha1.RouterModeInferencePool, keys, nil, true, true, false},
		{"pool, auth, gateway only", servingv1alpha1.RouterModeInferencePool, keys, gateway, true, false, false},
		{"pool, auth, policies off", servingv1alpha1.RouterModeInferencePool, keys, nil, false, false, false},
		{"pool, no auth, open", servingv1alpha1.RouterModeInferencePool, nil, nil, true, false, true},
		{"pool, no auth, gateway only", servingv1alpha1.RouterModeInferencePool, nil, gateway, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := endpoint("team", "chat")
			e.Spec.Router.Mode, e.Spec.Router.Auth = tc.mode, tc.auth
			e.Spec.NetworkPolicy.RouterFrom = tc.from
			e.Spec.NetworkPolicy.Enabled = ptr.To(tc.policiesOn)
			errs := validateInferencePoolAuth(e)
			if (len(errs) > 0) != tc.wantErr || (tc.wantErr && errs[0].Field != "spec.networkPolicy.routerFrom") {
				t.Errorf("errors %v, want error %v on spec.networkPolicy.routerFrom", errs, tc.wantErr)
			}
			w := inferencePoolWarnings(e)
			if (len(w) > 0) != tc.wantWarn || (tc.wantWarn && !strings.HasPrefix(w[0], "spec.networkPolicy.routerFrom")) {
				t.Errorf("warnings %q, want %v", w, tc.wantWarn)
			}
		})
	}
}
