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

	corev1 "k8s.io/api/core/v1"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestExposureWarnings(t *testing.T) {
	keys := &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthAPIKeys, APIKeys: &servingv1alpha1.APIKeysAuth{SecretName: "k"}}
	header := &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthTrustedHeader, TrustedHeader: &servingv1alpha1.TrustedHeaderAuth{Name: "X-T"}}
	for _, tc := range []struct {
		name string
		svc  corev1.ServiceType
		auth *servingv1alpha1.RouterAuth
		want string // "" for no warning
	}{
		{"cluster IP, no auth", corev1.ServiceTypeClusterIP, nil, ""},
		{"default type, no auth", "", nil, ""},
		{"load balancer, no auth", corev1.ServiceTypeLoadBalancer, nil, "without spec.router.auth"},
		{"node port, no auth", corev1.ServiceTypeNodePort, nil, "without spec.router.auth"},
		{"load balancer, API keys", corev1.ServiceTypeLoadBalancer, keys, ""},
		{"node port, trusted header", corev1.ServiceTypeNodePort, header, "clients that reach it without the gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := endpoint("team", "chat")
			e.Spec.Router.ServiceType = tc.svc
			e.Spec.Router.Auth = tc.auth
			w := specWarnings(e)
			found := false
			for _, s := range w {
				if strings.HasPrefix(s, "spec.router.serviceType") {
					found = true
					if tc.want == "" || !strings.Contains(s, tc.want) {
						t.Errorf("warning %q, want %q", s, tc.want)
					}
				}
			}
			if found != (tc.want != "") {
				t.Errorf("warnings %q, want one containing %q", w, tc.want)
			}
		})
	}
}
