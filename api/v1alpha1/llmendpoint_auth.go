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

package v1alpha1

// RouterAuthMode is how the router learns a request's tenant.
// +kubebuilder:validation:Enum=APIKeys;TrustedHeader
type RouterAuthMode string

const (
	// RouterAuthAPIKeys: clients send Authorization: Bearer <key>; the key
	// decides the tenant, and requests without a known key get 401.
	RouterAuthAPIKeys RouterAuthMode = "APIKeys"
	// RouterAuthTrustedHeader: a gateway in front of the router
	// authenticates clients and names the tenant in one header.
	RouterAuthTrustedHeader RouterAuthMode = "TrustedHeader"
)

// RouterAuth authenticates the tenants whose KV cache the router keeps
// apart. Without it, a tenant is whatever the client claims
// (X-Prefix-Aware-Id, prompt_cache_key, cache_salt): unauthenticated.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'APIKeys' || (has(self.apiKeys) && !has(self.trustedHeader))",message="spec.router.auth: mode APIKeys needs apiKeys and no trustedHeader"
// +kubebuilder:validation:XValidation:rule="self.mode != 'TrustedHeader' || (has(self.trustedHeader) && !has(self.apiKeys))",message="spec.router.auth: mode TrustedHeader needs trustedHeader and no apiKeys"
type RouterAuth struct {
	// mode is APIKeys or TrustedHeader.
	// +required
	Mode RouterAuthMode `json:"mode"`

	// apiKeys configures mode APIKeys.
	// +optional
	APIKeys *APIKeysAuth `json:"apiKeys,omitempty"`

	// trustedHeader configures mode TrustedHeader.
	// +optional
	TrustedHeader *TrustedHeaderAuth `json:"trustedHeader,omitempty"`
}

// APIKeysAuth names the Secret of API keys.
type APIKeysAuth struct {
	// secretName is a Secret in the endpoint's namespace that the user
	// provides: each data key is a tenant id (at most 64 characters, not
	// starting with '.'), its value that tenant's API keys, one per line
	// (at least 16 bytes each; two lines let a key be rotated with an
	// overlap). The routers mount it and reload it when it changes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	SecretName string `json:"secretName"`
}

// TrustedHeaderAuth names the header a gateway sets.
type TrustedHeaderAuth struct {
	// name is the header the tenant is taken from, and from nothing else:
	// prompt_cache_key, cache_salt and the Prefix-Aware-Id headers are
	// ignored. A request without it has no tenant. The gateway must
	// overwrite it on every request, and the router must be reachable
	// only through the gateway.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][-A-Za-z0-9_]*$`
	// +required
	Name string `json:"name"`
}
