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
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestLoRAAgentConfinedCondition(t *testing.T) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: LoRAAgentPolicy}}
	binding := func(actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: LoRAAgentPolicy},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: LoRAAgentPolicy, ValidationActions: actions},
		}
	}
	otherPolicy := binding(admissionregistrationv1.Deny)
	otherPolicy.Spec.PolicyName = "something-else"
	for _, tc := range []struct {
		name    string
		policy  *admissionregistrationv1.ValidatingAdmissionPolicy
		binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		want    metav1.ConditionStatus
		says    string
	}{
		{"installed", policy, binding(admissionregistrationv1.Deny), metav1.ConditionTrue, "confines each LoRA agent"},
		{"deny and audit", policy, binding(admissionregistrationv1.Audit, admissionregistrationv1.Deny), metav1.ConditionTrue, "confines"},
		{"no policy", nil, binding(admissionregistrationv1.Deny), metav1.ConditionFalse, "ValidatingAdmissionPolicy warmroute-lora-agent is not installed"},
		{"no binding", policy, nil, metav1.ConditionFalse, "no ValidatingAdmissionPolicyBinding warmroute-lora-agent"},
		{"binding of another policy", policy, otherPolicy, metav1.ConditionFalse, "no ValidatingAdmissionPolicyBinding"},
		{"audit only", policy, binding(admissionregistrationv1.Audit), metav1.ConditionFalse, "does not deny (validationActions [Audit])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loraAgentConfinedCondition(tc.policy, tc.binding)
			if c.Type != v1alpha1.ConditionLoRAAgentConfined || c.Status != tc.want {
				t.Fatalf("got %s=%s (%s), want %s", c.Type, c.Status, c.Reason, tc.want)
			}
			if want := map[metav1.ConditionStatus]string{
				metav1.ConditionTrue: v1alpha1.ReasonAdmissionPolicyInstalled, metav1.ConditionFalse: v1alpha1.ReasonAdmissionPolicyMissing,
			}[tc.want]; c.Reason != want {
				t.Errorf("reason %s, want %s", c.Reason, want)
			}
			if !strings.Contains(c.Message, tc.says) {
				t.Errorf("message %q does not say %q", c.Message, tc.says)
			}
			if tc.want == metav1.ConditionFalse && !strings.Contains(c.Message, "config/admission") {
				t.Errorf("message %q does not say what to apply", c.Message)
			}
		})
	}
}

var _ = Describe("LoRA agent admission policy condition", Ordered, func() {
	deletePolicy := func(obj client.Object) {
		obj.SetName(LoRAAgentPolicy)
		if err := k8sClient.Delete(suiteCtx, obj); !apierrors.IsNotFound(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	confined := func(ns, name string) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			ep := &v1alpha1.LLMEndpoint{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, ep)).To(Succeed())
			return meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionLoRAAgentConfined)
		}
	}
	withReason := func(status metav1.ConditionStatus, reason string) OmegaMatcher {
		return And(Not(BeNil()), HaveField("Status", status), HaveField("Reason", reason))
	}

	It("says when config/admission is missing, with a warning event, and follows the policy and its binding", func() {
		// Other specs install the real policy; start without it.
		deletePolicy(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
		deletePolicy(&admissionregistrationv1.ValidatingAdmissionPolicy{})
		DeferCleanup(installLoRAAgentPolicy)

		ns := newNamespace()
		ep := minimalEndpoint(ns, "tenants")
		ep.Spec.Model.MaxLoras = ptr.To[int32](2)
		Expect(k8sClient.Create(suiteCtx, ep)).To(Succeed())
		plain := minimalEndpoint(ns, "plain")
		Expect(k8sClient.Create(suiteCtx, plain)).To(Succeed())

		By("without the policy: False, AdmissionPolicyMissing, and a Warning event from the first reconcile")
		Eventually(confined(ns, "tenants")).Should(And(withReason(metav1.ConditionFalse, v1alpha1.ReasonAdmissionPolicyMissing),
			HaveField("Message", ContainSubstring("apply config/admission"))))
		Eventually(func(g Gomega) []string { return eventReasons(g, ns, "tenants") }).Should(ContainElement(v1alpha1.ReasonAdmissionPolicyMissing))

		By("with config/admission applied: True, through the watch alone (nothing else changes here)")
		installLoRAAgentPolicy()
		Eventually(confined(ns, "tenants")).Should(withReason(metav1.ConditionTrue, v1alpha1.ReasonAdmissionPolicyInstalled))

		By("a policy left unbound confines nothing")
		deletePolicy(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
		Eventually(confined(ns, "tenants")).Should(And(withReason(metav1.ConditionFalse, v1alpha1.ReasonAdmissionPolicyMissing),
			HaveField("Message", ContainSubstring("no ValidatingAdmissionPolicyBinding"))))

		By("an endpoint without LoRA has no such condition")
		Consistently(confined(ns, "plain")).Should(BeNil())
	})
})
