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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ModelCacheSpec is a persistent volume for Hugging Face's cache (HF_HOME),
// where vLLM downloads the model's weights: an instance that restarts, or
// one added by a scale-out, loads the weights from it instead of
// downloading them again. It is either an existing claim (claimName) or a
// claim the operator provisions (size), owned by the LLMEndpoint and
// deleted with it.
//
// All instances mount the same claim, so it must be ReadWriteMany to serve
// instances on several nodes. A ReadWriteOnce volume attaches to one node
// only: instances on other nodes stay Pending, so use it only when every
// instance runs on one node (or with one instance).
//
// +kubebuilder:validation:XValidation:rule="has(self.claimName) != has(self.size)",message="spec.model.cache must set exactly one of claimName (an existing claim) and size (a claim the operator provisions)"
// +kubebuilder:validation:XValidation:rule="has(self.size) || (!has(self.storageClassName) && !has(self.accessModes))",message="spec.model.cache.storageClassName and spec.model.cache.accessModes apply only to a claim the operator provisions (size)"
type ModelCacheSpec struct {
	// claimName is an existing PersistentVolumeClaim in the endpoint's
	// namespace, mounted read-write by every instance. The operator never
	// changes or deletes it.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ClaimName string `json:"claimName,omitempty"`

	// size is the capacity of the claim the operator provisions, named
	// <endpoint>-model-cache: at least the model's weights (about 2 bytes a
	// parameter in bf16: 16Gi for an 8B model, 140Gi for 70B). It may grow
	// later if the storage class allows expansion; it cannot shrink.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName is the provisioned claim's storage class; empty uses
	// the cluster's default class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// accessModes of the provisioned claim; defaults to ReadWriteMany,
	// which lets instances on every node share it (see above for
	// ReadWriteOnce).
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Enum=ReadWriteMany;ReadWriteOnce;ReadWriteOncePod
	// +listType=atomic
	// +optional
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
}

// CacheAccessModes are the access modes of the provisioned cache claim.
func CacheAccessModes(c *ModelCacheSpec) []corev1.PersistentVolumeAccessMode {
	if len(c.AccessModes) > 0 {
		return c.AccessModes
	}
	return []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
}
