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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// exposureWarnings warns about a router reachable from outside the cluster
// with no authenticated tenants: anyone who reaches it can claim any
// tenant id and probe that tenant's cached prefixes by timing. (A trusted
// header is no better there: clients could set it themselves.)
func exposureWarnings(e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	t := e.Spec.Router.ServiceType
	if t != corev1.ServiceTypeLoadBalancer && t != corev1.ServiceTypeNodePort {
		return nil
	}
	auth := e.Spec.Router.Auth
	switch {
	case auth == nil:
		return admission.Warnings{fmt.Sprintf("spec.router.serviceType: %s exposes the router outside the cluster without spec.router.auth: tenant ids are unauthenticated, so any client can claim another tenant's id and time its cached prefixes; set spec.router.auth.mode APIKeys", t)}
	case auth.Mode == servingv1alpha1.RouterAuthTrustedHeader:
		return admission.Warnings{fmt.Sprintf("spec.router.serviceType: %s exposes the router outside the cluster with spec.router.auth.mode TrustedHeader: clients that reach it without the gateway can set the header themselves; use APIKeys or a ClusterIP Service behind the gateway", t)}
	}
	return nil
}

// validateTrustedHeader refuses mode TrustedHeader with an empty
// spec.networkPolicy.routerFrom while the endpoint's NetworkPolicies are
// on. The header is worth only what the path to the router is: with
// routerFrom empty the routers' NetworkPolicy admits every pod of the
// cluster, and any of them could name whichever tenant it likes and read
// that tenant's cached prefixes by timing. routerFrom must name the
// gateway.
func validateTrustedHeader(e *servingv1alpha1.LLMEndpoint) field.ErrorList {
	auth := e.Spec.Router.Auth
	if auth == nil || auth.Mode != servingv1alpha1.RouterAuthTrustedHeader ||
		!servingv1alpha1.NetworkPolicyEnabled(e) || len(e.Spec.NetworkPolicy.RouterFrom) > 0 {
		return nil
	}
	return field.ErrorList{field.Required(field.NewPath("spec", "networkPolicy", "routerFrom"),
		"spec.router.auth.mode TrustedHeader needs routerFrom to admit only the gateway (its namespace and pods): with it empty every pod of the cluster reaches the router and can set the tenant header itself")}
}

// trustedHeaderWarnings warns about mode TrustedHeader with the endpoint's
// NetworkPolicies off: whatever limits who reaches the router is then the
// user's own, and the operator cannot check it.
func trustedHeaderWarnings(e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	auth := e.Spec.Router.Auth
	if auth == nil || auth.Mode != servingv1alpha1.RouterAuthTrustedHeader || servingv1alpha1.NetworkPolicyEnabled(e) {
		return nil
	}
	return admission.Warnings{"spec.networkPolicy.enabled: false with spec.router.auth.mode TrustedHeader: no NetworkPolicy limits who reaches the router, and any client that reaches it without the gateway can set the tenant header itself; make sure only the gateway can reach it"}
}
