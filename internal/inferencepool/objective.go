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

package inferencepool

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The InferenceObjective is alpha in the Inference Extension (since
// v1.0), in a group of its own: a cluster may have InferencePools and no
// InferenceObjectives. Only the fields the operator reads are here; a
// read object keeps the others out of sight, and the operator never
// writes one.

// ObjectiveGroupVersion is the InferenceObjective's API group and version.
var ObjectiveGroupVersion = schema.GroupVersion{Group: "inference.networking.x-k8s.io", Version: "v1alpha2"}

// ObjectiveKind is the InferenceObjective's kind.
const ObjectiveKind = "InferenceObjective"

// InferenceObjective is a class of requests to one InferencePool; a
// request names it in the x-gateway-inference-objective header.
// +kubebuilder:object:root=true
type InferenceObjective struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ObjectiveSpec `json:"spec"`
}

// InferenceObjectiveList is a list of InferenceObjectives.
// +kubebuilder:object:root=true
type InferenceObjectiveList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceObjective `json:"items"`
}

// ObjectiveSpec is the objective's priority and the pool it applies to.
type ObjectiveSpec struct {
	// Priority: higher is served first; nil sets none.
	Priority *int `json:"priority,omitempty"`
	// PoolRef is the InferencePool, in the objective's namespace.
	PoolRef PoolObjectReference `json:"poolRef"`
}

// PoolObjectReference names a pool in the same namespace; group and kind
// default to the InferencePool's (DefaultPoolRef).
type PoolObjectReference struct {
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Name  string `json:"name"`
}

// IsPool reports whether ref names the InferencePool name, its group and
// kind defaulted as the Inference Extension defaults them.
func (ref PoolObjectReference) IsPool(name string) bool {
	group, kind := ref.Group, ref.Kind
	if group == "" {
		group = GroupVersion.Group
	}
	if kind == "" {
		kind = Kind
	}
	return ref.Name == name && group == GroupVersion.Group && kind == Kind
}
