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
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The suite's operator runs as an administrator. These specs hold the
// builders' RBAC objects to the RBAC the install gives the operator
// (config/default's ClusterRoles, bound in one namespace as the namespaced
// mode binds them): Kubernetes refuses a Role that grants more than its
// creator holds and a binding of a role its creator neither holds nor may
// bind, so the operator's ServiceAccount creating them is the proof that
// reconciling works with that RBAC. Then the router and LoRA agent
// ServiceAccounts those objects grant are asked what they may do.
var _ = Describe("RBAC the operator grants", func() {
	const operatorNS = "warmroute-system"
	operatorSA := "system:serviceaccount:" + operatorNS + ":warmroute-controller-manager"
	var ns, other string
	var ep *v1alpha1.LLMEndpoint
	var asOperator client.Client

	BeforeEach(func() {
		ns, other = newNamespace(), newNamespace()
		installClusterRoles()
		Expect(k8sClient.Create(suiteCtx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warmroute-manager-rolebinding"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "warmroute-manager-role"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNS, Name: "warmroute-controller-manager"}},
		})).To(Succeed())
		Eventually(func() bool {
			return allowed(operatorSA, authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Namespace: ns})
		}).Should(BeTrue(), "the authorizer sees the operator's RoleBinding")

		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{
			UserName: operatorSA,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNS, "system:authenticated"},
		}
		var err error
		asOperator, err = client.New(c, client.Options{Scheme: testScheme})
		Expect(err).NotTo(HaveOccurred())
		// Not stored: the suite's own operator would reconcile it. The
		// objects below carry its controller reference all the same.
		ep = minimalEndpoint(ns, "chat")
		ep.UID = types.UID("5e0c1c3e-rbac")
	})

	It("lets the operator create the routers' and LoRA agents' RBAC, and nothing wider", func() {
		lease := buildRouterLease(ep)
		for _, o := range []client.Object{
			lease,
			buildRouterServiceAccount(ep), buildRouterRole(ep), buildRouterRoleBinding(ep), buildRouterLeaseBinding(ep),
			buildLoRAAgentServiceAccount(ep), buildLoRAAgentRole(ep), buildLoRAAgentRoleBinding(ep),
		} {
			Expect(asOperator.Create(suiteCtx, o)).To(Succeed(), "%T %s", o, o.GetName())
		}

		By("refusing what the operator does not hold and may not bind")
		forbidden := func(o client.Object) {
			GinkgoHelper()
			err := asOperator.Create(suiteCtx, o)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%T %s/%s: %v", o, o.GetNamespace(), o.GetName(), err)
		}
		bindClusterRole := func(namespace, name, role string) *rbacv1.RoleBinding {
			return &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: routerName(ep)}},
			}
		}
		forbidden(bindClusterRole(ns, "chat-admin", "cluster-admin"))
		// (not edit or admin: without a controller manager their aggregated
		// rules stay empty here, and an empty role is covered by anyone)
		forbidden(bindClusterRole(ns, "chat-scheduler", "system:kube-scheduler"))
		// The routers' ClusterRole only where the operator is granted.
		forbidden(bindClusterRole(other, "chat-router-lease", RouterClusterRole))
		forbidden(bindClusterRole("kube-system", "chat-router-lease", RouterClusterRole))
		// A Role with update on Leases: the operator holds none (escalation).
		forbidden(newRole(metav1.ObjectMeta{Namespace: ns, Name: "chat-leases"}, rbacv1.PolicyRule{
			APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"update"},
		}))
		forbidden(newRole(metav1.ObjectMeta{Namespace: ns, Name: "chat-secrets"}, rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
		}))

		By("letting the routers renew their Lease and read their ConfigMap, and no more")
		router := "system:serviceaccount:" + ns + ":" + routerName(ep)
		Eventually(func() bool {
			return allowed(router, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: routerLeaseName(ep)})
		}).Should(BeTrue())
		expectAccess(router, true,
			authorizationv1.ResourceAttributes{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: routerLeaseName(ep)},
			authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: ns, Name: routingConfigMapName(ep)},
		)
		expectAccess(router, false,
			authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"},
			authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: other, Name: routerLeaseName(ep)},
			authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: routerLeaseName(ep)},
			authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: ns, Name: "someone-elses"},
			authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: ns, Name: routingConfigMapName(ep)},
			authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns, Name: pickKeySecretName(ep)},
			authorizationv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: ns},
		)

		By("letting the LoRA agents report on their namespace's pods and read their ConfigMap, and no more")
		agent := "system:serviceaccount:" + ns + ":" + loraAgentName(ep)
		expectAccess(agent, true,
			authorizationv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: ns, Name: "chat-vllm-0"},
			authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: ns, Name: routingConfigMapName(ep)},
		)
		expectAccess(agent, false,
			authorizationv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: other},
			authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: routerLeaseName(ep)},
			authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: ns, Name: "someone-elses"},
			authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: ns},
		)
	})
})

// installClusterRoles creates the ClusterRoles config/default installs
// (the operator's, the routers'), leaving those that exist.
func installClusterRoles() {
	GinkgoHelper()
	installed := map[string]bool{}
	for _, o := range configDefaultClusterRoles() {
		err := k8sClient.Create(suiteCtx, o)
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred(), "ClusterRole %s", o.GetName())
		}
		installed[o.GetName()] = true
	}
	Expect(installed).To(HaveKey("warmroute-manager-role"))
	Expect(installed).To(HaveKey(RouterClusterRole))
}

// configDefaultClusterRoles are the ClusterRoles `kustomize build
// config/default` installs, with their final names.
func configDefaultClusterRoles() []*unstructured.Unstructured {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join("..", "config", "default"))
	Expect(err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		if r.GetKind() != "ClusterRole" {
			continue
		}
		m, err := r.Map()
		Expect(err).NotTo(HaveOccurred())
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// allowed asks the authorizer whether a ServiceAccount may do attrs.
func allowed(serviceAccount string, attrs authorizationv1.ResourceAttributes) bool {
	GinkgoHelper()
	parts := strings.Split(serviceAccount, ":")
	review, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(suiteCtx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               serviceAccount,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + parts[2], "system:authenticated"},
			ResourceAttributes: &attrs,
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return review.Status.Allowed
}

// expectAccess checks that the ServiceAccount may (or may not) do each.
func expectAccess(serviceAccount string, want bool, each ...authorizationv1.ResourceAttributes) {
	GinkgoHelper()
	for _, a := range each {
		Expect(allowed(serviceAccount, a)).To(Equal(want), "%s: %s %s/%s in %q", serviceAccount, a.Verb, a.Resource, a.Name, a.Namespace)
	}
}
