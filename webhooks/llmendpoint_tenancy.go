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
