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
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/loraagent"
)

var _ = Describe("Network boundary and pruning", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })
	AfterEach(func() { releasePods(ns) })

	It("creates NetworkPolicies the API server accepts as built, for each endpoint shape", func() {
		monitoring := networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "monitoring"}},
			PodSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app.kubernetes.io/name", Operator: metav1.LabelSelectorOpIn, Values: []string{"prometheus"}}}},
		}
		plain := minimalEndpoint(ns, "plain")
		lora := minimalEndpoint(ns, "lora")
		lora.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql-lora"}}
		lora.Spec.NetworkPolicy.MonitoringFrom = []networkingv1.NetworkPolicyPeer{monitoring}
		lora.Spec.NetworkPolicy.RouterFrom = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}
		for _, ep := range []*v1alpha1.LLMEndpoint{plain, lora} {
			Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		}
		for _, ep := range []*v1alpha1.LLMEndpoint{plain, lora} {
			Eventually(func(g Gomega) {
				stored := &v1alpha1.LLMEndpoint{}
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ep), stored)).To(Succeed())
				g.Expect(stored.Spec.NetworkPolicy.Enabled).To(HaveValue(BeTrue()), "the CRD defaults enabled")
				for _, want := range []*networkingv1.NetworkPolicy{buildVLLMNetworkPolicy(stored, suiteOptions), buildRouterNetworkPolicy(stored, suiteOptions)} {
					got := &networkingv1.NetworkPolicy{}
					g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(want), got)).To(Succeed())
					g.Expect(got.Spec).To(Equal(want.Spec), "%s as stored", want.Name)
					g.Expect(metav1.GetControllerOf(got)).To(HaveField("UID", stored.UID))
				}
			}).Should(Succeed())
		}
		got := &networkingv1.NetworkPolicy{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: vllmName(lora)}, got)).To(Succeed())
		Expect(got.Spec.Ingress).To(HaveLen(1))
		Expect(got.Spec.Ingress[0].Ports).To(ConsistOf(HaveField("Port.IntVal", BeEquivalentTo(vllmPort))))
		Expect(got.Spec.Ingress[0].From).To(Equal([]networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelEndpoint: "lora", LabelRole: roleRouter}}},
			monitoring,
			scraperPeer, // the operator's metrics scraper
		}))
	})

	It("removes the LoRA agent's RBAC when LoRA is turned off, and the NetworkPolicies when disabled", func() {
		ep := minimalEndpoint(ns, "chat")
		ep.Spec.Model.MaxLoras = ptr.To[int32](4)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		agentRBAC := func() []client.Object {
			m := metav1.ObjectMeta{Namespace: ns, Name: loraAgentName(ep)}
			return []client.Object{&corev1.ServiceAccount{ObjectMeta: m}, &rbacv1.Role{ObjectMeta: m}, &rbacv1.RoleBinding{ObjectMeta: m}}
		}
		policies := func() []client.Object {
			return []client.Object{
				&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vllmName(ep)}},
				&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: routerName(ep)}},
			}
		}
		exist := func(objs []client.Object) func(Gomega) {
			return func(g Gomega) {
				for _, o := range objs {
					g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(o), o)).To(Succeed(), "%T %s", o, o.GetName())
				}
			}
		}
		gone := func(objs []client.Object) func(Gomega) {
			return func(g Gomega) {
				for _, o := range objs {
					err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(o), o)
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s: %v", o, o.GetName(), err)
				}
			}
		}
		Eventually(exist(append(agentRBAC(), policies()...))).Should(Succeed())

		By("turning LoRA off and the NetworkPolicies off")
		patch := client.MergeFrom(ep.DeepCopy())
		ep.Spec.Model.MaxLoras = nil
		ep.Spec.NetworkPolicy.Enabled = ptr.To(false)
		Expect(k8sClient.Patch(suiteCtx, ep, patch)).To(Succeed())
		Eventually(gone(append(agentRBAC(), policies()...))).Should(Succeed())
		waitSettled(ns, "chat")
		// What is still wanted stays.
		var wanted []client.Object
		for _, o := range ownedObjects(ep) {
			if _, isPolicy := o.(*networkingv1.NetworkPolicy); !isPolicy {
				wanted = append(wanted, o)
			}
		}
		Eventually(exist(wanted)).Should(Succeed())
		Expect(getDeployment(Default, ns, vllmName(ep)).Spec.Template.Spec.ServiceAccountName).To(BeEmpty())

		By("turning them on again")
		patch = client.MergeFrom(ep.DeepCopy())
		ep.Spec.LoRAAdapters = []v1alpha1.LoRAAdapter{{Name: "sql", URI: "org/sql-lora"}}
		ep.Spec.NetworkPolicy.Enabled = nil
		Expect(k8sClient.Patch(suiteCtx, ep, patch)).To(Succeed())
		Eventually(exist(append(agentRBAC(), policies()...))).Should(Succeed())
	})

	It("leaves alone an object it does not control, even with the endpoint's labels", func() {
		ep := minimalEndpoint(ns, "chat")
		ep.Spec.NetworkPolicy.Enabled = ptr.To(false)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		mine := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat-extra", Labels: map[string]string{LabelEndpoint: "chat"}},
			Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		}
		Expect(k8sClient.Create(suiteCtx, mine)).To(Succeed())
		waitSettled(ns, "chat")
		Consistently(func() error { return k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(mine), mine) }).Should(Succeed())
	})
})

// The policy under test is the file users install, read from config/.
var loraAgentPolicyFile = filepath.Join("..", "config", "admission", "lora_agent_policy.yaml")

// installLoRAAgentPolicy creates the objects of config/admission.
func installLoRAAgentPolicy() { createObjectsOf(loraAgentPolicyFile) }

// createObjectsOf creates the objects of a manifest file, leaving those
// that exist already.
func createObjectsOf(path string) {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return
		} else {
			Expect(err).NotTo(HaveOccurred())
		}
		if len(u.Object) == 0 {
			continue
		}
		err := k8sClient.Create(suiteCtx, u)
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred(), "%s %s", u.GetKind(), u.GetName())
		}
	}
}

// agentClient acts as an endpoint's LoRA agent: its ServiceAccount, with
// the pod name a token projected into pod carries (none when pod is "").
func agentClient(ep *v1alpha1.LLMEndpoint, pod string) *kubernetes.Clientset {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ep.Namespace + ":" + loraAgentName(ep),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ep.Namespace, "system:authenticated"},
	}
	if pod != "" {
		c.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}
	}
	return kubernetes.NewForConfigOrDie(c)
}

var _ = Describe("LoRA agent admission policy", func() {
	var ns string
	BeforeEach(func() {
		installLoRAAgentPolicy()
		ns = newNamespace()
	})

	It("lets an agent change its own pod's state annotation and nothing else", func() {
		ep := minimalEndpoint(ns, "chat")
		ep.Spec.Model.MaxLoras = ptr.To[int32](2)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		// The operator's RoleBinding is what lets the agent patch pods at all.
		Eventually(func() error {
			return k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: loraAgentName(ep)}, &rbacv1.RoleBinding{})
		}).Should(Succeed())
		for _, name := range []string{"own", "other"} {
			Expect(k8sClient.Create(suiteCtx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"note": "keep"}},
				Spec: corev1.PodSpec{
					ServiceAccountName:           loraAgentName(ep),
					AutomountServiceAccountToken: ptr.To(false),
					Containers:                   []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:test"}},
				},
			})).To(Succeed())
		}
		agent := agentClient(ep, "own")
		mergePatch := func(c *kubernetes.Clientset, pod, body string) error {
			_, err := c.CoreV1().Pods(ns).Patch(suiteCtx, pod, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		}

		By("RBAC alone would let the agent patch any pod of the namespace")
		review, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(suiteCtx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + loraAgentName(ep),
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Resource: "pods", Name: "other"},
		}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(review.Status.Allowed).To(BeTrue())

		By("the policy refuses another pod's annotation")
		state := `{"metadata":{"annotations":{"` + routing.AnnotationLoRAState + `":"{}"}}}`
		// The API server loads a new policy within a moment.
		Eventually(func() error { return mergePatch(agent, "other", state) }).Should(
			SatisfyAll(HaveOccurred(), WithTransform(apierrors.IsInvalid, BeTrue()), MatchError(ContainSubstring("may not change pod other"))))

		By("and allows the agent's own report, through the agent's code")
		report := loraagent.PodAnnotator(agent, ns, "own")
		Expect(report(suiteCtx, routing.LoRAState{Loaded: []string{"sql"}})).To(Succeed())
		own, err := clientset.CoreV1().Pods(ns).Get(suiteCtx, "own", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(own.Annotations).To(HaveKeyWithValue(routing.AnnotationLoRAState, ContainSubstring("sql")))

		By("refusing any other change to its own pod")
		for _, body := range []string{
			`{"metadata":{"labels":{"serving.warmroute.dev/role":"router"}}}`,
			`{"metadata":{"annotations":{"note":"changed"}}}`,
			`{"metadata":{"annotations":{"note":null}}}`,
			`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"1000"}}}`,
			`{"spec":{"activeDeadlineSeconds":5}}`,
		} {
			Expect(mergePatch(agent, "own", body)).To(MatchError(ContainSubstring("may change only the serving.warmroute.dev/lora-state annotation")), body)
		}
		Expect(agent.CoreV1().Pods(ns).Delete(suiteCtx, "own", metav1.DeleteOptions{})).To(HaveOccurred())

		By("refusing a token bound to no pod")
		Expect(mergePatch(agentClient(ep, ""), "own", state)).To(MatchError(ContainSubstring("token bound to its pod")))

		By("leaving everyone else alone")
		Expect(mergePatch(clientset, "other", `{"metadata":{"labels":{"x":"y"}}}`)).To(Succeed())
	})
})
