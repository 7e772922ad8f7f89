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
	"slices"
	"strings"
	"testing"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// warning is how a test recognises one: how it starts, and a phrase of
// its reason.
type warning struct{ prefix, phrase string }

func TestFlowControlWarnings(t *testing.T) {
	keys := &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthAPIKeys, APIKeys: &servingv1alpha1.APIKeysAuth{SecretName: "k"}}
	header := &servingv1alpha1.RouterAuth{Mode: servingv1alpha1.RouterAuthTrustedHeader, TrustedHeader: &servingv1alpha1.TrustedHeaderAuth{Name: "X-T"}}
	tenants := func(names ...string) *servingv1alpha1.FlowControl {
		fc := &servingv1alpha1.FlowControl{}
		for _, n := range names {
			fc.Tenants = append(fc.Tenants, servingv1alpha1.TenantFlowEntry{Name: n})
		}
		return fc
	}
	for _, tc := range []struct {
		name string
		auth *servingv1alpha1.RouterAuth
		fc   *servingv1alpha1.FlowControl
		want []warning
	}{
		{"flow control off", nil, nil, nil},
		{"API keys, data key names", keys, tenants("team-a", "team_b", "batch.nightly"), nil},
		{"trusted header, any printable name", header, tenants("team a", "ops@example.com"), nil},
		{"no auth: honest clients only", nil, tenants("team-a"), []warning{{"spec.router.flowControl: without spec.router.auth", "binds only honest clients"}}},
		{"no auth, no tenants: still claimed ids", nil, tenants(), []warning{{"spec.router.flowControl: without spec.router.auth", "binds only honest clients"}}},
		{"API keys: no data key has a space or '@'", keys, tenants("team-a", "team b", "ops@example.com"), []warning{
			{`spec.router.flowControl.tenants[1].name: "team b" can never be a tenant with spec.router.auth.mode APIKeys`, "data keys of the API keys Secret"},
			{`spec.router.flowControl.tenants[2].name: "ops@example.com" can never be a tenant`, "applies to no request"},
		}},
		{"trusted header: a comma or outer spaces never arrive", header, tenants("a,b", " a", "a b"), []warning{
			{`spec.router.flowControl.tenants[0].name: "a,b" can never be a tenant with spec.router.auth.mode TrustedHeader`, "refused as two values"},
			{`spec.router.flowControl.tenants[1].name: " a" can never be a tenant`, "spaces around a header value"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := endpoint("team", "chat")
			e.Spec.Router.Auth = tc.auth
			e.Spec.Router.FlowControl = tc.fc
			got := slices.DeleteFunc(specWarnings(e), func(w string) bool { return !strings.HasPrefix(w, "spec.router.flowControl") })
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w.prefix) || !strings.Contains(got[i], w.phrase) {
					t.Errorf("warning %d: %q, want %q … %q", i, got[i], w.prefix, w.phrase)
				}
			}
		})
	}
}
