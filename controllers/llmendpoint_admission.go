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
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// LoRAAgentPolicy is the name of the ValidatingAdmissionPolicy, and of its
// binding, that confine each LoRA agent to its own pod's state annotation
// (config/admission; the Helm chart ships it, OLM users apply it). The
// agent's Role may patch any pod of its namespace, because RBAC cannot name
// pods that do not exist yet; without the policy that is what an agent can
// do, so the operator says so on every endpoint with LoRA.
const LoRAAgentPolicy = "warmroute-lora-agent"

// The operator reads the policy and its binding by name only: the cache
// lists and watches them with a metadata.name field selector, which is what
// RBAC's resourceNames allow for list and watch. They are cluster-scoped,
// so the permission is not among the markers (config/rbac/role.yaml holds
// only what the namespaced mode grants per watched namespace) but in
// config/rbac/cluster_role.yaml, bound cluster-wide in every mode.

// admissionPolicyCache restricts the cache of the policy kinds to the one
// policy and binding the operator looks at.
func admissionPolicyCache(byObject map[client.Object]cache.ByObject) {
	byName := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", LoRAAgentPolicy)}
	byObject[&admissionregistrationv1.ValidatingAdmissionPolicy{}] = byName
	byObject[&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}] = byName
}

// loraAgentConfinement reads the policy and its binding from the cache and
// returns the LoRAAgentConfined condition of an endpoint with LoRA.
func (r *LLMEndpointReconciler) loraAgentConfinement(ctx context.Context) (metav1.Condition, error) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := r.Get(ctx, client.ObjectKey{Name: LoRAAgentPolicy}, policy); err != nil {
		if !apierrors.IsNotFound(err) {
			return metav1.Condition{}, fmt.Errorf("get ValidatingAdmissionPolicy %s: %w", LoRAAgentPolicy, err)
		}
		policy = nil
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := r.Get(ctx, client.ObjectKey{Name: LoRAAgentPolicy}, binding); err != nil {
		if !apierrors.IsNotFound(err) {
			return metav1.Condition{}, fmt.Errorf("get ValidatingAdmissionPolicyBinding %s: %w", LoRAAgentPolicy, err)
		}
		binding = nil
	}
	return loraAgentConfinedCondition(policy, binding), nil
}

// loraAgentConfinedCondition says whether the policy is installed and
// enforced: present, bound by its binding, and the binding denies.
func loraAgentConfinedCondition(policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) metav1.Condition {
	missing := func(what string) metav1.Condition {
		return metav1.Condition{
			Type: v1alpha1.ConditionLoRAAgentConfined, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAdmissionPolicyMissing,
			Message: what + ": the LoRA agents' Role lets each agent patch any pod of this namespace, and nothing narrows it to its own pod's " +
				"state annotation; apply config/admission (kubectl apply --server-side -k config/admission), which the Helm chart installs and OLM cannot",
		}
	}
	switch {
	case policy == nil:
		return missing("the ValidatingAdmissionPolicy " + LoRAAgentPolicy + " is not installed")
	case binding == nil || binding.Spec.PolicyName != LoRAAgentPolicy:
		return missing("no ValidatingAdmissionPolicyBinding " + LoRAAgentPolicy + " binds the ValidatingAdmissionPolicy " + LoRAAgentPolicy)
	case !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return missing(fmt.Sprintf("the ValidatingAdmissionPolicyBinding %s does not deny (validationActions %v)", LoRAAgentPolicy, binding.Spec.ValidationActions))
	}
	return metav1.Condition{
		Type: v1alpha1.ConditionLoRAAgentConfined, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmissionPolicyInstalled,
		Message: "the ValidatingAdmissionPolicy " + LoRAAgentPolicy + " confines each LoRA agent to its own pod's state annotation",
	}
}

// loraEndpoints maps a change of the policy or its binding to every
// endpoint with LoRA, whose condition may change with it.
func (r *LLMEndpointReconciler) loraEndpoints(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.LLMEndpointList
	if err := r.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if loraEnabled(&list.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
