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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

var _ = Describe("Model cache", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// cacheClaimOf is the claim the vLLM pods mount at HF_HOME.
	cacheClaimOf := func(g Gomega, ep *v1alpha1.LLMEndpoint) string {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: vllmName(ep)}, d)).To(Succeed())
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == modelCacheVolume {
				return v.PersistentVolumeClaim.ClaimName
			}
		}
		return ""
	}

	It("provisions a claim owned by the endpoint, mounts it, and lets go of it for the user's own", func() {
		ep := minimalEndpoint(ns, "cached")
		ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{Size: ptr.To(resource.MustParse("20Gi"))}
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())

		pvc := &corev1.PersistentVolumeClaim{}
		key := types.NamespacedName{Namespace: ns, Name: "cached-model-cache"}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, key, pvc)).To(Succeed())
			g.Expect(cacheClaimOf(g, ep)).To(Equal(key.Name))
		}).Should(Succeed())
		Expect(metav1.GetControllerOf(pvc)).To(HaveField("UID", ep.UID))
		Expect(pvc.Spec.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}), "shared by instances on every node")
		Expect(pvc.Spec.Resources.Requests.Storage().String()).To(Equal("20Gi"))

		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), ep); err != nil {
				return err
			}
			ep.Spec.Model.Cache = &v1alpha1.ModelCacheSpec{ClaimName: "team-hf-cache"}
			return k8sClient.Update(suiteCtx, ep)
		})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(cacheClaimOf(g, ep)).To(Equal("team-hf-cache"))
			// Deleted; the API server's pvc-protection finalizer keeps it
			// until no pod uses it (kube-controller-manager is not running).
			err := k8sClient.Get(suiteCtx, key, pvc)
			g.Expect(apierrors.IsNotFound(err) || (err == nil && pvc.DeletionTimestamp != nil)).To(BeTrue(), "provisioned claim still wanted: %v", err)
		}).Should(Succeed())
		// The user's claim is never the operator's.
		Consistently(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "team-hf-cache"}, &corev1.PersistentVolumeClaim{}))
		}, "500ms").Should(BeTrue())
	})
})

var _ = Describe("Default images", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	vllmImageOf := func(g Gomega, ep *v1alpha1.LLMEndpoint) string {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: vllmName(ep)}, d)).To(Succeed())
		return d.Spec.Template.Spec.Containers[0].Image
	}

	It("records the default on the endpoint, runs what is recorded, and takes the default again when the record is removed", func() {
		ep := minimalEndpoint(ns, "pinned")
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
			g.Expect(ep.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationVLLMImage, suiteOptions.VLLMImage))
			g.Expect(ep.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationLoRAAgentImage, suiteOptions.RouterImage))
			g.Expect(vllmImageOf(g, ep)).To(Equal(suiteOptions.VLLMImage))
		}).Should(Succeed())

		// What an older operator recorded is what runs.
		patch := client.MergeFrom(ep.DeepCopy())
		ep.Annotations[v1alpha1.AnnotationVLLMImage] = "vllm/vllm-openai:older"
		Expect(k8sClient.Patch(suiteCtx, ep, patch)).To(Succeed())
		Eventually(func(g Gomega) string { return vllmImageOf(g, ep) }).Should(Equal("vllm/vllm-openai:older"))

		// Opting in to the operator's default: remove the record.
		patch = client.MergeFrom(ep.DeepCopy())
		delete(ep.Annotations, v1alpha1.AnnotationVLLMImage)
		Expect(k8sClient.Patch(suiteCtx, ep, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(vllmImageOf(g, ep)).To(Equal(suiteOptions.VLLMImage))
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
			g.Expect(ep.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationVLLMImage, suiteOptions.VLLMImage))
		}).Should(Succeed())
	})

	It("records no vLLM default for an endpoint that names its image", func() {
		ep := minimalEndpoint(ns, "explicit")
		ep.Spec.Model.Image = "my/vllm:1"
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		Eventually(func(g Gomega) string { return vllmImageOf(g, ep) }).Should(Equal("my/vllm:1"))
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
		Expect(ep.Annotations).NotTo(HaveKey(v1alpha1.AnnotationVLLMImage))
	})
})
