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

// Package inferencepool holds the few Go types of the Gateway API
// Inference Extension that the operator uses: the InferencePool
// (inference.networking.k8s.io/v1, release v1.0) it writes, and the
// InferenceObjective (objective.go) it reads. The Go module proxy does not
// serve sigs.k8s.io/gateway-api-inference-extension, so they are written
// here against its published CRD: field names, requiredness and defaults
// as there. Status is left out: the Gateway writes it, the operator never
// reads it, and server-side apply leaves fields it does not send alone.
// controller-gen writes their DeepCopy methods (make generate).
// +kubebuilder:object:generate=true
package inferencepool

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the InferencePool's API group and version.
var GroupVersion = schema.GroupVersion{Group: "inference.networking.k8s.io", Version: "v1"}

// Kind is the InferencePool's kind.
const Kind = "InferencePool"

// DefaultPickerPort is the port a Gateway assumes for an endpoint picker
// Service, and what the Inference Extension's own picker listens on.
const DefaultPickerPort = 9002

// AddToScheme registers InferencePool, InferenceObjective and their
// lists.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &InferencePool{}, &InferencePoolList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	s.AddKnownTypes(ObjectiveGroupVersion, &InferenceObjective{}, &InferenceObjectiveList{})
	metav1.AddToGroupVersion(s, ObjectiveGroupVersion)
	return nil
}

// InferencePool is a group of model server pods a Gateway routes to,
// asking an endpoint picker which one serves each request.
// +kubebuilder:object:root=true
type InferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
}

// InferencePoolList is a list of InferencePools.
// +kubebuilder:object:root=true
type InferencePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferencePool `json:"items"`
}

// Spec is the pool's spec; every field is required.
type Spec struct {
	// Selector selects the member pods (same namespace, matchLabels only).
	Selector LabelSelector `json:"selector"`
	// TargetPorts are the members' ports: exactly one.
	TargetPorts []Port `json:"targetPorts"`
	// EndpointPickerRef is the picker the Gateway calls.
	EndpointPickerRef EndpointPickerRef `json:"endpointPickerRef"`
}

// LabelSelector is the pool's selector: matchLabels only.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// Port is a port number (1-65535).
type Port struct {
	Number int32 `json:"number"`
}

// EndpointPickerRef names the picker: a Service (kind defaults to
// Service, group to core), its port (required for a Service: the Service
// port, not the target port) and the failure mode (FailClose or FailOpen,
// default FailClose).
type EndpointPickerRef struct {
	Group       *string `json:"group,omitempty"`
	Kind        string  `json:"kind,omitempty"`
	Name        string  `json:"name"`
	Port        *Port   `json:"port,omitempty"`
	FailureMode string  `json:"failureMode,omitempty"`
}
