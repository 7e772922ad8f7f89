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

// Package v1alpha1 contains the serving.warmroute.dev/v1alpha1 API: the
// LLMEndpoint, one model served by a fleet of vLLM instances behind a
// prefix-aware router.
// +kubebuilder:object:generate=true
// +groupName=serving.warmroute.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of this API.
var GroupVersion = schema.GroupVersion{Group: "serving.warmroute.dev", Version: "v1alpha1"}

// AddToScheme adds the API's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &LLMEndpoint{}, &LLMEndpointList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
