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

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The bounds below are the routing document's (api/routing/v1alpha1
// flowcontrol.go), repeated as literals because markers must be; the CRD's
// tests check the API server against those constants. Bounds are CEL rules
// rather than minimum/maximum so that the message states the whole range:
// the API server prefixes it with the field's path and the value, e.g.
// "spec.router.flowControl.tenants[0].weight: Invalid value: 0: must be
// between 1 and 1000".

// FlowControl shares the endpoint between tenants when it is full. While
// some instance that could serve a request has room, nothing changes: no
// queue. Rate limits apply first (429 with OpenAI's x-ratelimit-* headers);
// a request that passes them and finds every instance at its threshold
// waits in its tenant's queue, and queues are served by priority, then by
// weighted fair share of tokens, then earliest deadline. Tenants are who
// spec.router.auth says a request is; without auth they are what clients
// claim, so the limits bind honest clients only.
type FlowControl struct {
	// default applies to every tenant not listed in tenants, and to
	// requests without a tenant, as one tenant: they share one rate limit,
	// one queue and one share, so that a client inventing tenant ids
	// escapes nothing.
	// +kubebuilder:default={}
	// +optional
	Default TenantFlow `json:"default,omitempty"`

	// tenants are tenants with an entry of their own. A listed tenant's
	// unset fields take the field defaults, not those of default.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Tenants []TenantFlowEntry `json:"tenants,omitempty"`

	// queueTimeout is the longest a request waits in a queue before it is
	// answered 503 with Retry-After: a duration from 100ms to 10m.
	// Defaults to 30s.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('100ms') && duration(self) <= duration('10m')",message="must be a duration between 100ms and 10m, such as 30s"
	// +optional
	QueueTimeout *metav1.Duration `json:"queueTimeout,omitempty"`

	// maxQueued is the most requests queued over all tenants: an arrival
	// beyond it sheds the queued request of lowest priority (ties: the
	// tenant furthest over its share), or itself if it ranks lowest.
	// 1 to 100000; defaults to 1000.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 100000",message="must be between 1 and 100000"
	// +optional
	MaxQueued *int32 `json:"maxQueued,omitempty"`
}

// TenantFlow is one tenant's share, priority, rate limits and queue.
type TenantFlow struct {
	// weight is the tenant's share of the fleet's tokens while it is full,
	// relative to the other tenants with queued requests of the same
	// priority. 1 to 1000; defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 1000",message="must be between 1 and 1000"
	// +optional
	Weight *int32 `json:"weight,omitempty"`

	// priority orders queued requests: a higher one is served first, and
	// the lowest is shed first. A request may lower its own (header
	// X-Warmroute-Priority, or its InferenceObjective's priority in mode
	// InferencePool), never raise it. -1000 to 1000; defaults to 0.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XValidation:rule="self >= -1000 && self <= 1000",message="must be between -1000 and 1000"
	// +optional
	Priority *int32 `json:"priority,omitempty"`

	// requestsPerMinute limits the tenant's requests per minute (a bucket
	// that refills continuously, with a burst of one minute's limit);
	// beyond it requests get 429. 1 to 10000000; unset: unlimited.
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 10000000",message="must be between 1 and 10000000"
	// +optional
	RequestsPerMinute *int64 `json:"requestsPerMinute,omitempty"`

	// tokensPerMinute limits the tenant's tokens per minute, prompt and
	// completion: the prompt's are estimated when the request arrives and
	// settled with the response's usage. 1 to 10000000000; unset:
	// unlimited.
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 10000000000",message="must be between 1 and 10000000000"
	// +optional
	TokensPerMinute *int64 `json:"tokensPerMinute,omitempty"`

	// maxQueued is the most of the tenant's requests queued at once;
	// beyond it an arrival gets 429. 0 never queues the tenant: its
	// requests get 503 at once while the fleet is full. 0 to 10000;
	// defaults to 100.
	// +kubebuilder:default=100
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= 10000",message="must be between 0 and 10000"
	// +optional
	MaxQueued *int32 `json:"maxQueued,omitempty"`
}

// TenantFlowEntry is a tenant with flow control settings of its own.
type TenantFlowEntry struct {
	// name is the tenant id as spec.router.auth yields it: an API key's
	// data key in the Secret, the trusted header's value, or without auth
	// the id the client claims. 1 to 64 printable ASCII characters, not
	// starting with '.'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[ -~]*$') && !self.startsWith('.')",message="must be printable ASCII and not start with '.'"
	// +required
	Name string `json:"name"`

	TenantFlow `json:",inline"`
}
