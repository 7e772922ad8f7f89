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
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// In spec.router.mode InferencePool the Gateway's proxies send requests
// straight to the vLLM pods, so the endpoint's vLLM NetworkPolicy admits
// spec.networkPolicy.routerFrom (every pod when it is empty) to vLLM's
// port. Whatever reaches that port skips the picker, and with it tenant
// authentication and the cache salt.

// vllmOpenToEveryPod is whether the endpoint is in mode InferencePool with
// its NetworkPolicies on and routerFrom empty: the vLLM NetworkPolicy then
// admits every pod of the cluster to vLLM's port.
func vllmOpenToEveryPod(e *servingv1alpha1.LLMEndpoint) bool {
	return servingv1alpha1.RouterModeOf(e) == servingv1alpha1.RouterModeInferencePool &&
		servingv1alpha1.NetworkPolicyEnabled(e) && len(e.Spec.NetworkPolicy.RouterFrom) == 0
}

// validateInferencePoolAuth refuses spec.router.auth in mode
// InferencePool with an empty routerFrom while the NetworkPolicies are on:
// every pod of the cluster could then call vLLM directly, unauthenticated.
func validateInferencePoolAuth(e *servingv1alpha1.LLMEndpoint) field.ErrorList {
	if !vllmOpenToEveryPod(e) || e.Spec.Router.Auth == nil {
		return nil
	}
	return field.ErrorList{field.Required(field.NewPath("spec", "networkPolicy", "routerFrom"),
		"spec.router.auth with spec.router.mode InferencePool needs routerFrom to admit only the Gateway's proxies (their namespace and pods): they reach the vLLM pods directly, and with routerFrom empty so does every pod of the cluster, past authentication")}
}

// inferencePoolWarnings warns, in mode InferencePool without auth, that
// an empty routerFrom opens vLLM's port (its runtime API included) to every
// pod.
func inferencePoolWarnings(e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	if !vllmOpenToEveryPod(e) || e.Spec.Router.Auth != nil {
		return nil
	}
	return admission.Warnings{"spec.networkPolicy.routerFrom: empty with spec.router.mode InferencePool: the Gateway's proxies reach the vLLM pods directly, and so does every other pod of the cluster; list the Gateway's namespace and pods (for Envoy Gateway: namespace envoy-gateway-system, label gateway.envoyproxy.io/owning-gateway-name)"}
}
