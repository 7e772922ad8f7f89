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

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScalingSpec is how the endpoint scales by itself, beside whatever sets
// spec.replicas (a user, a HorizontalPodAutoscaler).
type ScalingSpec struct {
	// scaleToZeroAfter is how long the endpoint may serve no request before
	// the operator sets spec.replicas to 0, freeing its GPUs. A request
	// that arrives at zero is held by the router, and the operator sets
	// spec.replicas to 1 on it; the request is answered once that instance
	// has loaded the model. A HorizontalPodAutoscaler does nothing while
	// spec.replicas is 0 and takes over again from 1. From 30s to 720h
	// (30 days); unset, the endpoint never scales to zero by itself.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s') && duration(self) <= duration('720h')",message="spec.scaling.scaleToZeroAfter must be a duration from 30s to 720h, such as 15m"
	// +optional
	ScaleToZeroAfter *metav1.Duration `json:"scaleToZeroAfter,omitempty"`
}

// ScaleToZeroAfter is spec.scaling.scaleToZeroAfter, 0 when unset (never).
func ScaleToZeroAfter(e *LLMEndpoint) time.Duration {
	if d := e.Spec.Scaling.ScaleToZeroAfter; d != nil {
		return d.Duration
	}
	return 0
}

// The operator's record, on the endpoint, of its last crossing of zero
// (RFC 3339, UTC); exactly one is present once the endpoint has crossed.
const (
	// AnnotationScaledToZeroAt is when the operator set spec.replicas to 0
	// for idleness. Demand older than this does not wake the endpoint.
	AnnotationScaledToZeroAt = "serving.warmroute.dev/scaled-to-zero-at"
	// AnnotationWokeAt is when the endpoint left zero (on demand, or when
	// the operator first saw spec.replicas above 0 after its own scale
	// down): the idle period runs from no earlier than this.
	AnnotationWokeAt = "serving.warmroute.dev/woke-at"
)
