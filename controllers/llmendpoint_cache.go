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

package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

const (
	// modelCacheVolume is the persistent model cache, mounted at HF_HOME
	// (hfHome): Hugging Face downloads, and vLLM loads, the weights there.
	// The rest of the cache directory (vLLM's compile cache, Triton's)
	// stays on the pod's own emptyDir, so instances never share files
	// they write at once.
	modelCacheVolume = "model-cache"
	hfHome           = cacheMountPath + "/huggingface"
)

// modelCacheClaimName is the claim the operator provisions for spec.model.cache.size.
func modelCacheClaimName(ep *v1alpha1.LLMEndpoint) string { return ep.Name + "-model-cache" }

// modelCacheVolumes are the persistent model cache's volume and the vLLM
// container's mount of it, none without spec.model.cache.
func modelCacheVolumes(ep *v1alpha1.LLMEndpoint) ([]corev1.Volume, []corev1.VolumeMount) {
	c := ep.Spec.Model.Cache
	if c == nil {
		return nil, nil
	}
	claim := c.ClaimName
	if claim == "" {
		claim = modelCacheClaimName(ep)
	}
	return []corev1.Volume{{
			Name: modelCacheVolume,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: claim,
			}},
		}}, []corev1.VolumeMount{{
			Name: modelCacheVolume, MountPath: hfHome,
		}}
}

// buildModelCacheClaim is the claim of spec.model.cache.size, nil when the
// cache is the user's claim or there is none.
func buildModelCacheClaim(ep *v1alpha1.LLMEndpoint) *corev1.PersistentVolumeClaim {
	c := ep.Spec.Model.Cache
	if c == nil || c.Size == nil {
		return nil
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: objectMeta(ep, modelCacheClaimName(ep), roleVLLM, "vllm"),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      v1alpha1.CacheAccessModes(c),
			StorageClassName: c.StorageClassName,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *c.Size},
			},
		},
	}
}

// reconcileModelCache applies the provisioned cache claim, if any; the
// prune phase deletes it when the spec no longer asks for one.
func (r *LLMEndpointReconciler) reconcileModelCache(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	pvc := buildModelCacheClaim(ep)
	if pvc == nil {
		return nil
	}
	_, _, err := r.apply(ctx, ep, pvc)
	return err
}
