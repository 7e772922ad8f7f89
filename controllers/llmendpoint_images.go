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
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// vllmImage is the image the vLLM container runs: spec.model.image, else
// the recorded default, else the operator's.
func vllmImage(ep *v1alpha1.LLMEndpoint, opts Options) string {
	if ep.Spec.Model.Image != "" {
		return ep.Spec.Model.Image
	}
	return recordedOr(ep, v1alpha1.AnnotationVLLMImage, opts.VLLMImage)
}

// loraAgentImage is the LoRA agent's image: the recorded one, else the
// operator's router image (the agent ships in it).
func loraAgentImage(ep *v1alpha1.LLMEndpoint, opts Options) string {
	return recordedOr(ep, v1alpha1.AnnotationLoRAAgentImage, opts.RouterImage)
}

func recordedOr(ep *v1alpha1.LLMEndpoint, annotation, def string) string {
	if v := ep.Annotations[annotation]; v != "" {
		return v
	}
	return def
}

// imagesToRecord are the annotations the endpoint lacks: the defaults its
// vLLM pods are about to run. An endpoint with spec.model.image records
// only the agent's image.
func imagesToRecord(ep *v1alpha1.LLMEndpoint, opts Options) map[string]string {
	want := map[string]string{}
	if ep.Spec.Model.Image == "" && ep.Annotations[v1alpha1.AnnotationVLLMImage] == "" {
		want[v1alpha1.AnnotationVLLMImage] = opts.VLLMImage
	}
	if ep.Annotations[v1alpha1.AnnotationLoRAAgentImage] == "" {
		want[v1alpha1.AnnotationLoRAAgentImage] = opts.RouterImage
	}
	return want
}

// recordDefaultImages writes the missing image annotations onto the
// endpoint, before the vLLM Deployment is applied with them. A merge patch
// of the annotations only: it never touches the spec, and a concurrent
// change to other annotations is kept.
func (r *LLMEndpointReconciler) recordDefaultImages(ctx context.Context, ep *v1alpha1.LLMEndpoint) error {
	want := imagesToRecord(ep, r.Options)
	if len(want) == 0 {
		return nil
	}
	before := ep.DeepCopy()
	if ep.Annotations == nil {
		ep.Annotations = map[string]string{}
	}
	for k, v := range want {
		ep.Annotations[k] = v
	}
	if err := r.Patch(ctx, ep, client.MergeFrom(before), client.FieldOwner(FieldOwner)); err != nil {
		// The builders fall back to the operator's defaults, which are
		// what the annotations would have said.
		*ep = *before
		return fmt.Errorf("record the default images: %w", err)
	}
	return nil
}
