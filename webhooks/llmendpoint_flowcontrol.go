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
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// secretDataKey is what a Secret's data key may be (the API server's own
// rule), and so every tenant id mode APIKeys can yield.
var secretDataKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// flowControlWarnings warns about flow control that cannot do what it
// says. The CRD checks every value; what it cannot see is how tenants
// are identified (spec.router.auth), which decides who a limit binds.
// They are warnings: the entries are harmless, and the auth may change
// next. Whether a tenant named for mode APIKeys is a data key of the
// Secret is not checked: the operator reads no Secret (see the validator).
func flowControlWarnings(e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	fc := e.Spec.Router.FlowControl
	if fc == nil {
		return nil
	}
	var w admission.Warnings
	auth := e.Spec.Router.Auth
	if auth == nil {
		return append(w, "spec.router.flowControl: without spec.router.auth a tenant is whatever id the client claims (X-Prefix-Aware-Id, prompt_cache_key, cache_salt): any client can claim any tenant's id, and with it that tenant's weight, priority and limits, so flow control binds only honest clients; set spec.router.auth to make tenants authenticated")
	}
	for i, t := range fc.Tenants {
		if why := unreachableTenant(auth, t.Name); why != "" {
			w = append(w, fmt.Sprintf("spec.router.flowControl.tenants[%d].name: %q can never be a tenant with spec.router.auth.mode %s (%s): the entry applies to no request", i, t.Name, auth.Mode, why))
		}
	}
	return w
}

// unreachableTenant says why auth can never yield the tenant id name, or
// "" when it can.
func unreachableTenant(auth *servingv1alpha1.RouterAuth, name string) string {
	switch auth.Mode {
	case servingv1alpha1.RouterAuthAPIKeys:
		if !secretDataKey.MatchString(name) {
			return "tenants are the data keys of the API keys Secret: letters, digits, '-', '_' and '.'"
		}
	case servingv1alpha1.RouterAuthTrustedHeader:
		switch {
		case strings.Contains(name, ","):
			return "a header value with a comma is refused as two values"
		case strings.TrimSpace(name) != name:
			return "HTTP drops the spaces around a header value"
		}
	}
	return ""
}
