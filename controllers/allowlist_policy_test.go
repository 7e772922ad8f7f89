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
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The sample users install, read from config/samples/admission.
var allowListPolicyFile = filepath.Join("..", "config", "samples", "admission", "llmendpoint_allowlist.yaml")

var _ = Describe("LLMEndpoint allow-list admission policy", func() {
	It("refuses images and Secrets off the list in the namespaces that enforce it, and nothing else", func() {
		system := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "warmroute-system"}}
		if err := k8sClient.Create(suiteCtx, system); !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		createObjectsOf(allowListPolicyFile)
		DeferCleanup(func() {
			for _, o := range []client.Object{
				&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "warmroute-llmendpoint-allowlist"}},
				&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "warmroute-llmendpoint-allowlist"}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "warmroute-system", Name: "warmroute-llmendpoint-allowlist"}},
			} {
				Expect(client.IgnoreNotFound(k8sClient.Delete(suiteCtx, o))).To(Succeed())
			}
		})
		// The list holds the images the operator records by default (the
		// suite's), as the sample says it must.
		cm := &corev1.ConfigMap{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: "warmroute-system", Name: "warmroute-llmendpoint-allowlist"}, cm)).To(Succeed())
		cm.Data["images"] += "warmroute-router:\n"
		Expect(k8sClient.Update(suiteCtx, cm)).To(Succeed())
		enforced := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-", Labels: map[string]string{"serving.warmroute.dev/allowlist": "enforce"}}}
		Expect(k8sClient.Create(suiteCtx, enforced)).To(Succeed())
		ns, other := enforced.Name, newNamespace()
		secretRef := func(name string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k"}}
		}
		endpoint := func(ns, name string, mutate func(*v1alpha1.LLMEndpoint)) *v1alpha1.LLMEndpoint {
			ep := minimalEndpoint(ns, name)
			mutate(ep)
			return ep
		}

		By("refusing an image off the list, once the API server has the policy")
		Eventually(func() error {
			return k8sClient.Create(suiteCtx, endpoint(ns, "miner", func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.Image = "registry.example/miner:1" }))
		}).Should(MatchError(ContainSubstring("image registry.example/miner:1 is not allowed in this namespace")))

		By("refusing every other way to an image or Secret off the list")
		for _, tc := range []struct {
			want   string
			mutate func(*v1alpha1.LLMEndpoint)
		}{
			{"image vllm/vllm-openai-evil:1", func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Model.Image = "vllm/vllm-openai-evil:1" }},
			{"image evil.example/router:1", func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Router.Image = "evil.example/router:1" }},
			{"image evil.example/vllm:1", func(ep *v1alpha1.LLMEndpoint) {
				ep.Annotations = map[string]string{v1alpha1.AnnotationVLLMImage: "evil.example/vllm:1"}
			}},
			{"image evil.example/agent:1", func(ep *v1alpha1.LLMEndpoint) {
				ep.Annotations = map[string]string{v1alpha1.AnnotationLoRAAgentImage: "evil.example/agent:1"}
			}},
			{"Secret db-password", func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Model.HFTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "db-password"}
			}},
			{"Secret db-password", func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Model.Env = []corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "B", ValueFrom: secretRef("db-password")}}
			}},
			{"Secret db-password", func(ep *v1alpha1.LLMEndpoint) {
				ep.Spec.Router.Auth = &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "db-password"}}
			}},
		} {
			ep := endpoint(ns, "refused", tc.mutate)
			Expect(k8sClient.Create(suiteCtx, ep)).To(MatchError(ContainSubstring(tc.want+" is not allowed in this namespace")), "%+v", ep.Spec)
		}

		By("admitting what the list allows")
		allowed := endpoint(ns, "allowed", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Image = "vllm/vllm-openai:v0.11.0"
			ep.Spec.Router.Image = "ghcr.io/warmroute/warmroute-router:v0.2.0"
			ep.Spec.Model.HFTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "hf-token"}
			ep.Spec.Model.Env = []corev1.EnvVar{{Name: "VLLM_API_KEY", ValueFrom: secretRef("vllm-api-key")}}
			ep.Spec.Router.Auth = &v1alpha1.RouterAuth{Mode: v1alpha1.RouterAuthAPIKeys, APIKeys: &v1alpha1.APIKeysAuth{SecretName: "tenant-api-keys"}}
		})
		Expect(k8sClient.Create(suiteCtx, allowed)).To(Succeed())
		Eventually(func(g Gomega) {
			ep := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(allowed), ep)).To(Succeed())
			g.Expect(ep.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationLoRAAgentImage, suiteOptions.RouterImage), "the operator records its default")
		}).Should(Succeed())

		By("leaving namespaces without the label alone")
		Expect(k8sClient.Create(suiteCtx, endpoint(other, "anything", func(ep *v1alpha1.LLMEndpoint) {
			ep.Spec.Model.Image = "registry.example/miner:1"
			ep.Spec.Model.HFTokenSecretRef = &v1alpha1.SecretKeyRef{Name: "db-password"}
		}))).To(Succeed())

		By("refusing spec changes once a Secret leaves the list, but never an update that keeps the spec")
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: "warmroute-system", Name: "warmroute-llmendpoint-allowlist"}, cm)).To(Succeed())
		cm.Data["secrets"] = "vllm-api-key\ntenant-api-keys\n"
		Expect(k8sClient.Update(suiteCtx, cm)).To(Succeed())
		Eventually(func() error {
			ep := &v1alpha1.LLMEndpoint{}
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(allowed), ep); err != nil {
				return err
			}
			ep.Spec.Replicas = ptr.To[int32](3)
			return k8sClient.Update(suiteCtx, ep)
		}).Should(MatchError(ContainSubstring("Secret hf-token is not allowed")))
		Eventually(func() error {
			ep := &v1alpha1.LLMEndpoint{}
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(allowed), ep); err != nil {
				return err
			}
			ep.Labels = map[string]string{"team": "a"}
			return k8sClient.Update(suiteCtx, ep)
		}).Should(Succeed())
		Expect(k8sClient.Delete(suiteCtx, allowed)).To(Succeed())
	})
})
