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

package install_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The operator's ServiceAccount as every install method names it, in the
// namespace the tests install into.
const (
	operatorNamespace = "warmroute-system"
	operatorUser      = "system:serviceaccount:" + operatorNamespace + ":warmroute-controller-manager"
)

// The namespaced mode's watched namespaces (config/namespaced's example),
// and one it does not watch.
var (
	watched   = []string{"team-a", "team-b"}
	unwatched = "team-c"
)

// access is one question to the API server's authorizer about the
// operator's ServiceAccount (what `kubectl auth can-i --as=...` asks).
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += "/" + a.name
	}
	if a.namespace == "" {
		return s + " (cluster-wide)"
	}
	return s + " in " + a.namespace
}

// reconcileNeeds is what the operator does in a namespace whose endpoints
// it reconciles.
func reconcileNeeds(ns string) []access {
	return []access{
		{"watch", "serving.warmroute.dev", "llmendpoints", ns, ""},
		{"patch", "serving.warmroute.dev", "llmendpoints", ns, ""},
		{"update", "serving.warmroute.dev", "llmendpoints/status", ns, ""},
		{"update", "serving.warmroute.dev", "llmendpoints/scale", ns, ""},
		{"create", "apps", "deployments", ns, ""},
		{"patch", "", "configmaps", ns, ""},
		{"patch", "", "pods", ns, ""},
		{"create", "", "serviceaccounts", ns, ""},
		{"create", "rbac.authorization.k8s.io", "roles", ns, ""},
		{"create", "rbac.authorization.k8s.io", "rolebindings", ns, ""},
		{"create", "", "secrets", ns, ""},
		// The endpoint's Lease: created, read, never written again.
		{"create", "coordination.k8s.io", "leases", ns, ""},
		{"watch", "coordination.k8s.io", "leases", ns, ""},
		// The routers' renewal right is granted through bind.
		{"bind", "rbac.authorization.k8s.io", "clusterroles", ns, "warmroute-router"},
	}
}

// neverAllowed holds in every mode: the finding of issue #51 and its
// neighbours.
func neverAllowed(ns string) []access {
	return []access{
		// The control plane's leader elections and node heartbeats.
		{"update", "coordination.k8s.io", "leases", "kube-system", "kube-controller-manager"},
		{"patch", "coordination.k8s.io", "leases", "kube-system", "kube-scheduler"},
		{"update", "coordination.k8s.io", "leases", "kube-node-lease", "node-1"},
		// Any Lease at all: the routers renew theirs through bind.
		{"update", "coordination.k8s.io", "leases", ns, ""},
		{"delete", "coordination.k8s.io", "leases", ns, ""},
		// Only its own ClusterRole is bound, and no Role is escalated.
		{"bind", "rbac.authorization.k8s.io", "clusterroles", ns, "cluster-admin"},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", ns, "admin"},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", ns, ""},
		{"escalate", "rbac.authorization.k8s.io", "roles", ns, ""},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""},
		// It creates Secrets, never reads them.
		{"get", "", "secrets", ns, ""},
		{"list", "", "secrets", ns, ""},
	}
}

// outsideWatched is what the namespaced mode refuses outside the watched
// namespaces.
func outsideWatched(ns string) []access {
	return []access{
		{"patch", "", "pods", ns, ""},
		{"create", "", "configmaps", ns, ""},
		{"create", "", "serviceaccounts", ns, ""},
		{"create", "rbac.authorization.k8s.io", "roles", ns, ""},
		{"create", "rbac.authorization.k8s.io", "rolebindings", ns, ""},
		{"create", "apps", "deployments", ns, ""},
		{"create", "coordination.k8s.io", "leases", ns, ""},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", ns, "warmroute-router"},
		{"list", "", "pods", ns, ""},
	}
}

// everyMode is what the operator may do in either mode outside the
// endpoints' namespaces.
var everyMode = []access{
	// The LoRA agents' admission policy, by name.
	{"watch", "admissionregistration.k8s.io", "validatingadmissionpolicies", "", "warmroute-lora-agent"},
	// Its own leader election.
	{"update", "coordination.k8s.io", "leases", operatorNamespace, "warmroute-operator.serving.warmroute.dev"},
	{"create", "coordination.k8s.io", "leases", operatorNamespace, ""},
}

// installMethod is one way to install the operator, reduced to the RBAC
// objects it creates in a cluster.
type installMethod struct {
	name       string
	namespaced bool
	rbac       func(t *testing.T) []*unstructured.Unstructured
}

// TestOperatorRBACPerInstallMethod installs the operator's RBAC as
// kustomize, Helm and OLM create it, in the cluster-wide and the namespaced
// mode, and asks the API server's authorizer what the operator's
// ServiceAccount may do: in no mode may it update kube-system's Leases (or
// any Lease but its leader election's), bind ClusterRoles other than the
// routers', or read Secrets; in the namespaced mode it may write nothing
// outside the watched namespaces; in both it may do what reconciling
// needs. The three methods are held to the same answers for each mode.
func TestOperatorRBACPerInstallMethod(t *testing.T) {
	c := startCluster(t)
	cs := kubernetes.NewForConfigOrDie(c.cfg)
	for _, ns := range append([]string{operatorNamespace, unwatched}, watched...) {
		c.kubectlIn(t, "", "create", "namespace", ns)
	}
	methods := []installMethod{
		{"kustomize config/default", false, func(t *testing.T) []*unstructured.Unstructured { return kustomizeBuild(t, "default") }},
		{"kustomize config/namespaced", true, func(t *testing.T) []*unstructured.Unstructured { return kustomizeBuild(t, "namespaced") }},
		{"helm", false, func(t *testing.T) []*unstructured.Unstructured { return render(t, operatorNamespace) }},
		{"helm watchNamespaces", true, func(t *testing.T) []*unstructured.Unstructured {
			return render(t, operatorNamespace, "--set", "watchNamespaces={"+strings.Join(watched, ",")+"}")
		}},
		{"olm AllNamespaces", false, func(t *testing.T) []*unstructured.Unstructured { return olmInstall(t, nil) }},
		{"olm MultiNamespace", true, func(t *testing.T) []*unstructured.Unstructured { return olmInstall(t, watched) }},
	}
	for _, m := range methods {
		t.Run(m.name, func(t *testing.T) {
			objs := rbacObjects(m.rbac(t))
			manifests := toYAMLStream(t, objs)
			c.kubectlIn(t, manifests, "apply", "--server-side", "-f", "-")
			defer func() {
				c.kubectlIn(t, manifests, "delete", "--ignore-not-found", "-f", "-")
				// The next method starts from no grants: wait until the
				// authorizer has seen the deletions.
				waitFor(t, cs, reconcileNeeds(watched[0])[0], false)
			}()

			var allowed, denied []access
			for _, ns := range watched {
				allowed = append(allowed, reconcileNeeds(ns)...)
			}
			allowed = append(allowed, everyMode...)
			denied = append(denied, neverAllowed(watched[0])...)
			if m.namespaced {
				denied = append(denied, outsideWatched(unwatched)...)
				denied = append(denied, outsideWatched("kube-system")...)
				denied = append(denied, access{"list", "", "pods", "", ""}, access{"watch", "", "configmaps", "", ""})
			} else {
				allowed = append(allowed, reconcileNeeds(unwatched)...)
			}
			// RBAC reaches the authorizer through informers: wait for the
			// first grant, then ask the rest.
			waitFor(t, cs, allowed[0], true)
			for _, a := range allowed {
				if !can(t, cs, a) {
					t.Errorf("the operator may not %s", a)
				}
			}
			for _, a := range denied {
				if can(t, cs, a) {
					t.Errorf("the operator may %s", a)
				}
			}
		})
	}
}

// kustomizeBuild is `kustomize build config/<dir>`, through the kustomize
// API bin/kustomize is built from.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, "config", dir))
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	y, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(y))
}

// olmInstall is the RBAC OLM creates from the bundle's CSV for an
// OperatorGroup with targets (none: AllNamespaces), as OLM's operator group
// controller does: each ServiceAccount's permissions become a Role and
// RoleBinding in the operator's namespace and a copy in each target
// namespace, or, for AllNamespaces, a ClusterRole and ClusterRoleBinding;
// clusterPermissions become a ClusterRole and ClusterRoleBinding; the
// bundle's own RBAC manifests (ClusterRoles for users and the routers) are
// created as they are.
func olmInstall(t *testing.T, targets []string) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(repoRoot, "bundle", "manifests")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	var csv operatorsv1alpha1.ClusterServiceVersion
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".clusterserviceversion.yaml") {
			if err := yaml.Unmarshal(raw, &csv); err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			continue
		}
		out = append(out, decode(t, string(raw))...)
	}
	spec := csv.Spec.InstallStrategy.StrategySpec
	if len(spec.Permissions)+len(spec.ClusterPermissions) == 0 {
		t.Fatal("the CSV grants nothing")
	}
	subject := func(sa string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: operatorNamespace}}
	}
	clusterWide := func(name string, p operatorsv1alpha1.StrategyDeploymentPermissions) {
		out = append(out,
			toUnstructured(t, &rbacv1.ClusterRole{TypeMeta: typeMeta("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: p.Rules}),
			toUnstructured(t, &rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subject(p.ServiceAccountName)}))
	}
	for i, p := range spec.Permissions {
		name := fmt.Sprintf("%s-permissions-%d", csv.Name, i)
		if len(targets) == 0 {
			clusterWide(name, p)
			continue
		}
		for _, ns := range append([]string{operatorNamespace}, targets...) {
			out = append(out,
				toUnstructured(t, &rbacv1.Role{TypeMeta: typeMeta("Role"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: p.Rules}),
				toUnstructured(t, &rbacv1.RoleBinding{TypeMeta: typeMeta("RoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subject(p.ServiceAccountName)}))
		}
	}
	for i, p := range spec.ClusterPermissions {
		clusterWide(fmt.Sprintf("%s-cluster-permissions-%d", csv.Name, i), p)
	}
	return out
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// rbacObjects are the RBAC kinds of an install; the rest plays no part in
// what the authorizer answers.
func rbacObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains([]string{"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

func toYAMLStream(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String()
}

// can asks the authorizer whether the operator's ServiceAccount may do a.
func can(t *testing.T, cs *kubernetes.Clientset, a access) bool {
	t.Helper()
	resource, subresource, _ := strings.Cut(a.resource, "/")
	review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   operatorUser,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: resource, Subresource: subresource, Namespace: a.namespace, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s: %v", a, err)
	}
	return review.Status.Allowed
}

// waitFor waits until the authorizer answers want for a.
func waitFor(t *testing.T, cs *kubernetes.Clientset, a access, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return can(t, cs, a) == want, nil
	})
	if err != nil {
		t.Fatalf("the authorizer did not come to answer %v to %s: %v", want, a, err)
	}
}
