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

import "k8s.io/apimachinery/pkg/util/intstr"

// RolloutSpec is how the vLLM instances are replaced when their pod
// template changes (a new image, new args). Each value is a number of
// instances or a percentage of spec.replicas (maxSurge rounds up,
// maxUnavailable down, as a Deployment does).
//
// +kubebuilder:validation:XValidation:rule="!((has(self.maxSurge) ? string(self.maxSurge) : '0') in ['0', '0%'] && has(self.maxUnavailable) && string(self.maxUnavailable) in ['0', '0%'])",message="spec.rollout.maxSurge and spec.rollout.maxUnavailable must not both be 0 (maxSurge defaults to 0): a rollout could then replace no instance"
type RolloutSpec struct {
	// maxSurge is how many instances a rollout may start above
	// spec.replicas. Each needs GPUs of its own, and on a cluster with no
	// spare GPU a surge instance stays Pending and the rollout never ends,
	// so it defaults to 0: the rollout stops one instance, then starts its
	// replacement. Raise it when spare GPUs make a rollout without lost
	// capacity possible.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 && self <= 512 : self.matches('^[0-9]{1,3}%$')",message="spec.rollout.maxSurge must be a number of instances (0-512) or a percentage such as 25%"
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// maxUnavailable is how many instances a rollout may have stopped at
	// once, and how many the instances' PodDisruptionBudget lets a drain
	// evict at once (at least one, so a drain is never blocked). Defaults
	// to 1.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 && self <= 512 : self.matches('^(100|[1-9]?[0-9])%$')",message="spec.rollout.maxUnavailable must be a number of instances (0-512) or a percentage from 0% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// Rollout defaults: no surge (no spare GPU needed), one instance at a time.
var (
	DefaultMaxSurge       = intstr.FromInt32(0)
	DefaultMaxUnavailable = intstr.FromInt32(1)
)

// MaxSurge is spec.rollout.maxSurge or its default.
func MaxSurge(e *LLMEndpoint) intstr.IntOrString {
	return deref(e.Spec.Rollout.MaxSurge, DefaultMaxSurge)
}

// MaxUnavailable is spec.rollout.maxUnavailable or its default.
func MaxUnavailable(e *LLMEndpoint) intstr.IntOrString {
	return deref(e.Spec.Rollout.MaxUnavailable, DefaultMaxUnavailable)
}
