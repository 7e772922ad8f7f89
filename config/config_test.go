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

// Package config_test checks the kustomize install: that every overlay
// builds, and that what `kubectl apply -k config/default` installs fits
// together (names, namespaces, certificates, RBAC, flags).
package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// build is `kustomize build` of one directory, through the kustomize API
// that bin/kustomize (v5.7.1) is built from.
func build(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	return res
}

func TestEveryOverlayBuilds(t *testing.T) {
	for _, dir := range []string{"crd", "rbac", "manager", "webhook", "certmanager", "prometheus", "samples", "scorecard", "admission", "default", "namespaced", "manifests"} {
		t.Run(dir, func(t *testing.T) {
			if n := build(t, dir).Size(); n == 0 {
				t.Fatalf("config/%s builds to nothing", dir)
			}
		})
	}
}

// installed is config/default, decoded by kind.
type installed struct {
	t       *testing.T
	objects map[string][]map[string]any // by kind
}

func buildDefault(t *testing.T) installed {
	in := installed{t: t, objects: map[string][]map[string]any{}}
	for _, r := range build(t, "default").Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		in.objects[r.GetKind()] = append(in.objects[r.GetKind()], m)
	}
	return in
}

// one decodes the only object of a kind, or the one with a name.
func (in installed) one(kind, name string, into any) {
	in.t.Helper()
	var found []map[string]any
	for _, o := range in.objects[kind] {
		if name == "" || o["metadata"].(map[string]any)["name"] == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		in.t.Fatalf("want one %s %q, found %d", kind, name, len(found))
	}
	raw, err := yaml.Marshal(found[0])
	if err != nil {
		in.t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		in.t.Fatalf("%s %s: %v", kind, name, err)
	}
}

// serviceAndManager decodes a Service and the manager Deployment behind it.
func (in installed) serviceAndManager(service string) (corev1.Service, appsv1.Deployment) {
	in.t.Helper()
	var svc corev1.Service
	in.one("Service", service, &svc)
	var d appsv1.Deployment
	in.one("Deployment", "warmroute-controller-manager", &d)
	return svc, d
}

func TestDefaultInstallsIntoItsNamespace(t *testing.T) {
	in := buildDefault(t)
	const ns = "warmroute-system"
	var nsObj corev1.Namespace
	in.one("Namespace", "", &nsObj)
	if nsObj.Name != ns || nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("Namespace %s with labels %v, want %s enforcing restricted", nsObj.Name, nsObj.Labels, ns)
	}
	clusterScoped := []string{"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService"}
	for kind, objs := range in.objects {
		for _, o := range objs {
			md := o["metadata"].(map[string]any)
			name, _ := md["name"].(string)
			got, _ := md["namespace"].(string)
			if kind == "RoleBinding" && name == authReaderBinding {
				continue // in kube-system: TestDefaultCustomMetricsAPI
			}
			if kind == "APIService" {
				continue // named after the API it serves: TestDefaultCustomMetricsAPI
			}
			if slices.Contains(clusterScoped, kind) {
				if got != "" {
					t.Errorf("%s %s is cluster-scoped but has namespace %q", kind, name, got)
				}
				continue
			}
			if got != ns {
				t.Errorf("%s %s in namespace %q, want %s", kind, name, got, ns)
			}
			if kind != "Namespace" && !strings.HasPrefix(name, "warmroute-") {
				t.Errorf("%s %s lacks the warmroute- name prefix", kind, name)
			}
		}
	}
}

func TestDefaultManager(t *testing.T) {
	in := buildDefault(t)
	var d appsv1.Deployment
	in.one("Deployment", "warmroute-controller-manager", &d)
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want the manager", len(spec.Containers))
	}
	c := spec.Containers[0]
	for _, arg := range []string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("manager args %q lack %s", c.Args, arg)
		}
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("manager has no liveness or readiness probe")
	}
	if c.Image != "ghcr.io/warmroute/warmroute-operator:v0.1.0" {
		t.Errorf("manager image %q: kustomize did not set it", c.Image)
	}

	var sa corev1.ServiceAccount
	in.one("ServiceAccount", spec.ServiceAccountName, &sa)

	// The manager's ClusterRole and leader election Role are bound to its
	// ServiceAccount.
	bound := map[string]bool{}
	for _, o := range in.objects["ClusterRoleBinding"] {
		var b rbacv1.ClusterRoleBinding
		in.one("ClusterRoleBinding", o["metadata"].(map[string]any)["name"].(string), &b)
		if slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: "warmroute-system"}) {
			bound[b.RoleRef.Name] = true
		}
	}
	for _, o := range in.objects["RoleBinding"] {
		var b rbacv1.RoleBinding
		in.one("RoleBinding", o["metadata"].(map[string]any)["name"].(string), &b)
		if slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: "warmroute-system"}) {
			bound[b.RoleRef.Name] = true
		}
	}
	for _, role := range []string{"warmroute-manager-role", "warmroute-metrics-auth-role", "warmroute-leader-election-role"} {
		if !bound[role] {
			t.Errorf("%s is not bound to ServiceAccount %s", role, sa.Name)
		}
	}
	var le rbacv1.Role
	in.one("Role", "warmroute-leader-election-role", &le)
	if !slices.ContainsFunc(le.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases")
	}) {
		t.Error("the leader election Role does not grant Leases")
	}
}

// Nothing the manager's ServiceAccount is bound to lets it read a Secret:
// a compromised operator must not hand out the cluster's credentials. It
// may create them (each endpoint's cache-salt key), which reveals nothing
// it did not write itself.
func TestManagerReadsNoSecrets(t *testing.T) {
	in := buildDefault(t)
	check := func(kind, name string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			core := slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")
			secrets := slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*")
			if core && secrets && slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "create" }) {
				t.Errorf("%s %s grants %v on secrets", kind, name, r.Verbs)
			}
		}
	}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range in.objects[kind] {
			name := o["metadata"].(map[string]any)["name"].(string)
			var role struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			raw, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(raw, &role); err != nil {
				t.Fatal(err)
			}
			check(kind, name, role.Rules)
		}
	}
}

// The webhook configurations reach the manager through the webhook
// Service, with a certificate for that Service's name whose CA
// cert-manager injects.
func TestDefaultWebhooksAndCertificate(t *testing.T) {
	in := buildDefault(t)
	svc, d := in.serviceAndManager("warmroute-webhook-service")
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("webhook Service selects %s=%s, which the manager pods lack", k, v)
		}
	}

	cert := in.certificateFor(svc, d, "warmroute-serving-cert")

	injectFrom := cert.Metadata.Namespace + "/" + cert.Metadata.Name
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	in.one("MutatingWebhookConfiguration", "", &mwc)
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	in.one("ValidatingWebhookConfiguration", "", &vwc)
	type hook struct {
		config string
		ann    map[string]string
		cc     admissionregistrationv1.WebhookClientConfig
	}
	var hooks []hook
	for _, w := range mwc.Webhooks {
		hooks = append(hooks, hook{mwc.Name, mwc.Annotations, w.ClientConfig})
	}
	for _, w := range vwc.Webhooks {
		hooks = append(hooks, hook{vwc.Name, vwc.Annotations, w.ClientConfig})
	}
	if len(hooks) != 2 {
		t.Fatalf("%d webhooks, want a mutating and a validating one", len(hooks))
	}
	for _, h := range hooks {
		if got := h.ann["cert-manager.io/inject-ca-from"]; got != injectFrom {
			t.Errorf("%s: inject-ca-from %q, want %q", h.config, got, injectFrom)
		}
		if s := h.cc.Service; s == nil || s.Name != svc.Name || s.Namespace != svc.Namespace {
			t.Errorf("%s: calls %+v, want Service %s/%s", h.config, s, svc.Namespace, svc.Name)
		}
	}
}

// certificate is a cert-manager Certificate, as much as the tests read.
type certificate struct {
	Metadata struct{ Name, Namespace string }
	Spec     struct {
		DNSNames   []string `json:"dnsNames"`
		SecretName string   `json:"secretName"`
		IssuerRef  struct{ Kind, Name string }
	}
}

// certificateFor decodes a Certificate and checks that it names svc, comes
// from the installed Issuer and is mounted by the manager.
func (in installed) certificateFor(svc corev1.Service, d appsv1.Deployment, name string) certificate {
	in.t.Helper()
	var cert certificate
	for _, o := range in.objects["Certificate"] {
		if o["metadata"].(map[string]any)["name"] == name {
			raw, _ := yaml.Marshal(o)
			if err := yaml.Unmarshal(raw, &cert); err != nil {
				in.t.Fatal(err)
			}
		}
	}
	if cert.Metadata.Name != name {
		in.t.Fatalf("no Certificate %s", name)
	}
	wantDNS := svc.Name + "." + svc.Namespace + ".svc"
	if !slices.Contains(cert.Spec.DNSNames, wantDNS) {
		in.t.Errorf("Certificate %s DNS names %q lack %s", name, cert.Spec.DNSNames, wantDNS)
	}
	if len(in.objects["Issuer"]) != 1 || in.objects["Issuer"][0]["metadata"].(map[string]any)["name"] != cert.Spec.IssuerRef.Name {
		in.t.Errorf("Certificate %s's issuer %q is not the Issuer installed", name, cert.Spec.IssuerRef.Name)
	}
	mounted := slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName
	})
	if !mounted {
		in.t.Errorf("the manager does not mount Certificate %s's Secret %s", name, cert.Spec.SecretName)
	}
	return cert
}

const authReaderBinding = "warmroute-custom-metrics-auth-reader"

// TestDefaultCustomMetricsAPI checks the wiring an aggregated API server
// needs: an APIService whose Service reaches the manager's port, a
// certificate for that Service whose CA is injected, the manager serving
// on that port, and the two bindings for delegated authentication.
func TestDefaultCustomMetricsAPI(t *testing.T) {
	in := buildDefault(t)
	svc, d := in.serviceAndManager("warmroute-custom-metrics-service")
	cert := in.certificateFor(svc, d, "warmroute-custom-metrics-serving-cert")

	var api apiregistrationv1.APIService
	in.one("APIService", "v1beta2.custom.metrics.k8s.io", &api)
	if s := api.Spec.Service; s == nil || s.Name != svc.Name || s.Namespace != svc.Namespace || ptr.Deref(s.Port, 0) != svc.Spec.Ports[0].Port {
		t.Errorf("APIService calls %+v, want Service %s/%s port %d", s, svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
	}
	if got, want := api.Annotations["cert-manager.io/inject-ca-from"], cert.Metadata.Namespace+"/"+cert.Metadata.Name; got != want {
		t.Errorf("APIService inject-ca-from %q, want %q", got, want)
	}
	c := d.Spec.Template.Spec.Containers[0]
	var port int32
	for _, p := range c.Ports {
		if p.Name == svc.Spec.Ports[0].TargetPort.StrVal {
			port = p.ContainerPort
		}
	}
	if port == 0 || !slices.Contains(c.Args, fmt.Sprintf("--custom-metrics-port=%d", port)) {
		t.Errorf("the manager serves the custom metrics API on none of its ports: args %q, ports %+v", c.Args, c.Ports)
	}
	sa := d.Spec.Template.Spec.ServiceAccountName
	var delegator rbacv1.ClusterRoleBinding
	in.one("ClusterRoleBinding", "warmroute-custom-metrics-auth-delegator", &delegator)
	var reader rbacv1.RoleBinding
	in.one("RoleBinding", authReaderBinding, &reader)
	if reader.Namespace != "kube-system" {
		t.Errorf("%s in %q, want kube-system", reader.Name, reader.Namespace)
	}
	for _, b := range []struct {
		role     rbacv1.RoleRef
		subjects []rbacv1.Subject
	}{{delegator.RoleRef, delegator.Subjects}, {reader.RoleRef, reader.Subjects}} {
		if len(b.subjects) != 1 || b.subjects[0].Name != sa || b.subjects[0].Namespace != d.Namespace {
			t.Errorf("%s is bound to %+v, want ServiceAccount %s/%s", b.role.Name, b.subjects, d.Namespace, sa)
		}
	}
}

func TestDefaultMetricsService(t *testing.T) {
	svc, d := buildDefault(t).serviceAndManager("warmroute-controller-manager-metrics-service")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 {
		t.Fatalf("metrics Service ports %+v, want 8443", svc.Spec.Ports)
	}
	target := svc.Spec.Ports[0].TargetPort.String()
	if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool {
		return p.Name == target && p.ContainerPort == 8443
	}) {
		t.Errorf("metrics Service targets %q, which is not the manager's port 8443", target)
	}
}
