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
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The value sets the tests render and install: the default, each
// certificate choice and each toggle off.
var variants = map[string][]string{
	"default":           nil,
	"self-signed":       {"--set", "webhook.certificate=self-signed"},
	"no-webhook":        {"--set", "webhook.enable=false"},
	"no-metrics":        {"--set", "metrics.enable=false"},
	"no-custom-metrics": {"--set", "customMetrics.enabled=false"},
}

func TestHelmLint(t *testing.T) {
	for name, args := range variants {
		t.Run(name, func(t *testing.T) {
			mustHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
		})
	}
}

// render is `helm template` of the chart into namespace ns, with the CRD.
func render(t *testing.T, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	return decode(t, mustHelm(t, append([]string{"template", "warmroute", chartDir, "--namespace", ns, "--include-crds"}, args...)...))
}

type rendered []*unstructured.Unstructured

func (r rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

func (r rendered) kinds() []string {
	var k []string
	for _, o := range r {
		k = append(k, o.GetKind())
	}
	return k
}

func manager(t *testing.T, r rendered) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	o := r.find("Deployment", "warmroute-controller-manager")
	if o == nil {
		t.Fatalf("no manager Deployment among %v", r.kinds())
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &d, true); err != nil {
		t.Fatalf("manager Deployment: %v", err)
	}
	return d, d.Spec.Template.Spec.Containers[0]
}

func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestChartIsConfigDefault checks that with its default values the chart
// installs what `make deploy` does (`kustomize build` of config/default and
// config/admission), object for object, in the release namespace instead
// of warmroute-system.
func TestChartIsConfigDefault(t *testing.T) {
	var want []string
	for _, dir := range []string{"default", "admission"} {
		res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), repoRoot+"/config/"+dir)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, installedObjects(res.Resources())...)
	}
	var got []string
	for _, o := range render(t, "ops") {
		got = append(got, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("chart objects\n  %s\nwant config/default's and config/admission's\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	d, c := manager(t, render(t, "ops"))
	if c.Image != "ghcr.io/warmroute/warmroute-operator:v0.1.0" || *d.Spec.Replicas != 2 {
		t.Errorf("default image %s, replicas %d; want config/'s", c.Image, *d.Spec.Replicas)
	}

	// Where the policy is installed otherwise, the chart leaves it out.
	for _, o := range render(t, "ops", "--set", "loraAgentPolicy.enable=false") {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			t.Errorf("loraAgentPolicy.enable=false still renders %s %s", o.GetKind(), o.GetName())
		}
	}
}

// installedObjects names kustomize's objects as the chart installs them.
func installedObjects(res []*resource.Resource) []string {
	var want []string
	for _, r := range res {
		if r.GetKind() == "Namespace" {
			continue // Helm installs into the release namespace
		}
		ns := r.GetNamespace()
		if ns == "warmroute-system" {
			ns = "ops" // kube-system stays
		}
		want = append(want, r.GetKind()+" "+ns+"/"+r.GetName())
	}
	return want
}

func TestTemplateAppliesValues(t *testing.T) {
	r := rendered(render(t, "ops",
		"--set", "manager.image.repository=registry.example.com/mirror/operator",
		"--set", "manager.image.tag=v9.9.9",
		"--set", "manager.image.pullPolicy=Always",
		"--set", "router.image.repository=registry.example.com/mirror/router",
		"--set", "router.image.tag=v9.9.8",
		"--set", "manager.replicas=3",
		"--set", "manager.resources.limits.memory=1Gi",
		"--set", "manager.nodeSelector.pool=system",
		"--set", "manager.tolerations[0].key=dedicated",
		"--set", "manager.tolerations[0].operator=Exists",
		"--set", "manager.tolerations[0].effect=NoSchedule",
	))
	d, c := manager(t, r)
	if c.Image != "registry.example.com/mirror/operator:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("manager image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	if got := env(c, "RELATED_IMAGE_ROUTER"); got != "registry.example.com/mirror/router:v9.9.8" {
		t.Errorf("router image %q", got)
	}
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
	}
	if got := c.Resources.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("memory limit %s, want 1Gi", got)
	}
	spec := d.Spec.Template.Spec
	if spec.NodeSelector["pool"] != "system" || len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "dedicated" {
		t.Errorf("nodeSelector %v, tolerations %v", spec.NodeSelector, spec.Tolerations)
	}
	if d.Namespace != "ops" {
		t.Errorf("Deployment in %q, want the release namespace", d.Namespace)
	}
	for _, o := range r {
		if o.GetKind() != "CustomResourceDefinition" && o.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" { // crds/ is not templated
			t.Errorf("%s %s is not labelled managed-by Helm", o.GetKind(), o.GetName())
		}
	}

	// A digest instead of a tag.
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	_, c = manager(t, render(t, "ops", "--set", "manager.image.tag="+digest))
	if c.Image != "ghcr.io/warmroute/warmroute-operator@"+digest {
		t.Errorf("image by digest %s", c.Image)
	}
}

func TestTemplateWebhookChoices(t *testing.T) {
	t.Run("cert-manager", func(t *testing.T) {
		r := rendered(render(t, "ops"))
		for _, kind := range []string{"Certificate", "Issuer", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			if r.find(kind, "") == nil {
				t.Errorf("no %s", kind)
			}
		}
		if got := r.find("MutatingWebhookConfiguration", "").GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "ops/warmroute-serving-cert" {
			t.Errorf("inject-ca-from %q", got)
		}
		if r.find("Secret", "") != nil {
			t.Error("a Secret besides cert-manager's")
		}
	})
	t.Run("self-signed", func(t *testing.T) {
		r := rendered(render(t, "ops", variants["self-signed"]...))
		if r.find("Certificate", "") != nil || r.find("Issuer", "") != nil {
			t.Error("cert-manager objects with the self-signed choice")
		}
		secret := r.find("Secret", "webhook-server-cert")
		if secret == nil {
			t.Fatalf("no webhook-server-cert Secret among %v", r.kinds())
		}
		ca, _, _ := unstructured.NestedString(secret.Object, "data", "ca.crt")
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			hooks, _, _ := unstructured.NestedSlice(r.find(kind, "").Object, "webhooks")
			for _, h := range hooks {
				got, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle")
				if ca == "" || got != ca {
					t.Errorf("%s caBundle is not the Secret's CA", kind)
				}
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		r := rendered(render(t, "ops", variants["no-webhook"]...))
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Secret"} {
			if r.find(kind, "") != nil {
				t.Errorf("%s with the webhooks off", kind)
			}
		}
		if r.find("Certificate", "warmroute-serving-cert") != nil {
			t.Error("webhook Certificate with the webhooks off")
		}
		if r.find("Service", "warmroute-webhook-service") != nil {
			t.Error("webhook Service with the webhooks off")
		}
		d, c := manager(t, r)
		if env(c, "ENABLE_WEBHOOKS") != "false" || hasMount(c, "webhook-certs") || hasVolume(d, "webhook-certs") {
			t.Errorf("manager still set up for webhooks: ENABLE_WEBHOOKS=%q, mounts %v", env(c, "ENABLE_WEBHOOKS"), c.VolumeMounts)
		}
		// The custom metrics API still needs the cert-manager Issuer.
		if r.find("Issuer", "") == nil {
			t.Error("no Issuer for the custom metrics API's Certificate")
		}
		r = rendered(render(t, "ops", "--set", "webhook.enable=false", "--set", "customMetrics.enabled=false"))
		for _, kind := range []string{"Certificate", "Issuer", "Secret"} {
			if r.find(kind, "") != nil {
				t.Errorf("%s with the webhooks and the custom metrics API off", kind)
			}
		}
		d, c = manager(t, r)
		if len(c.VolumeMounts) != 0 || len(d.Spec.Template.Spec.Volumes) != 0 {
			t.Errorf("manager mounts %v with no server needing a certificate", c.VolumeMounts)
		}
	})
}

func hasMount(c corev1.Container, name string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name })
}

func hasVolume(d appsv1.Deployment, name string) bool {
	return slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
}

func TestTemplateCustomMetrics(t *testing.T) {
	const apiService = "v1beta2.custom.metrics.k8s.io"
	serves := func(t *testing.T, r rendered) {
		t.Helper()
		d, c := manager(t, r)
		if !slices.Contains(c.Args, "--custom-metrics-port=6443") || !hasMount(c, "custom-metrics-certs") || !hasVolume(d, "custom-metrics-certs") {
			t.Errorf("manager does not serve the custom metrics API: args %v, mounts %v", c.Args, c.VolumeMounts)
		}
		svc, _, _ := unstructured.NestedMap(r.find("APIService", apiService).Object, "spec", "service")
		if svc["name"] != "warmroute-custom-metrics-service" || svc["namespace"] != "ops" || r.find("Service", "warmroute-custom-metrics-service") == nil {
			t.Errorf("APIService points at %v", svc)
		}
		// The authentication reader binding must stay where the ConfigMap it
		// grants is, for the release's ServiceAccount.
		rb := r.find("RoleBinding", "warmroute-custom-metrics-auth-reader")
		subjects, _, _ := unstructured.NestedSlice(rb.Object, "subjects")
		if rb.GetNamespace() != "kube-system" || subjects[0].(map[string]any)["namespace"] != "ops" {
			t.Errorf("auth reader RoleBinding in %q for %v", rb.GetNamespace(), subjects)
		}
		if r.find("ClusterRoleBinding", "warmroute-custom-metrics-auth-delegator") == nil {
			t.Error("no auth delegator ClusterRoleBinding")
		}
	}
	t.Run("cert-manager", func(t *testing.T) {
		r := rendered(render(t, "ops"))
		serves(t, r)
		a := r.find("APIService", apiService)
		if got := a.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "ops/warmroute-custom-metrics-serving-cert" {
			t.Errorf("inject-ca-from %q", got)
		}
		cert := r.find("Certificate", "warmroute-custom-metrics-serving-cert")
		if cert == nil {
			t.Fatalf("no custom metrics Certificate among %v", r.kinds())
		}
		secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		if secret != "custom-metrics-server-cert" || !slices.Contains(names, "warmroute-custom-metrics-service.ops.svc") {
			t.Errorf("Certificate for %v into %s", names, secret)
		}
	})
	t.Run("self-signed", func(t *testing.T) {
		r := rendered(render(t, "ops", variants["self-signed"]...))
		serves(t, r)
		secret := r.find("Secret", "custom-metrics-server-cert")
		if secret == nil {
			t.Fatalf("no custom-metrics-server-cert Secret among %v", r.kinds())
		}
		ca, _, _ := unstructured.NestedString(secret.Object, "data", "ca.crt")
		a := r.find("APIService", apiService)
		if got, _, _ := unstructured.NestedString(a.Object, "spec", "caBundle"); ca == "" || got != ca {
			t.Error("APIService caBundle is not the Secret's CA")
		}
		if _, ok := a.GetAnnotations()["cert-manager.io/inject-ca-from"]; ok {
			t.Error("inject-ca-from with the self-signed choice")
		}
		// The serving certificate is for the Service's name, signed by the CA.
		crt, _, _ := unstructured.NestedString(secret.Object, "data", "tls.crt")
		leaf := parseCert(t, crt)
		roots := x509.NewCertPool()
		roots.AddCert(parseCert(t, ca))
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "warmroute-custom-metrics-service.ops.svc", Roots: roots}); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		r := rendered(render(t, "ops", variants["no-custom-metrics"]...))
		for _, o := range r {
			if o.GetKind() == "APIService" || strings.Contains(o.GetName(), "custom-metrics") {
				t.Errorf("custom metrics API off, yet %s %s", o.GetKind(), o.GetName())
			}
		}
		d, c := manager(t, r)
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--custom-metrics-port") }) ||
			hasMount(c, "custom-metrics-certs") || hasVolume(d, "custom-metrics-certs") ||
			slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "custom-metrics" }) {
			t.Errorf("manager still serves the custom metrics API: args %v, mounts %v, ports %v", c.Args, c.VolumeMounts, c.Ports)
		}
	})
}

// parseCert decodes a base64 PEM certificate as a Secret holds it.
func parseCert(t *testing.T, b64 string) *x509.Certificate {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTemplateMetricsToggle(t *testing.T) {
	_, c := manager(t, render(t, "ops"))
	if !slices.Contains(c.Args, "--metrics-bind-address=:8443") {
		t.Errorf("metrics on: args %v", c.Args)
	}
	r := rendered(render(t, "ops", variants["no-metrics"]...))
	_, c = manager(t, r)
	if !slices.Contains(c.Args, "--metrics-bind-address=0") {
		t.Errorf("metrics off: args %v", c.Args)
	}
	for _, o := range r {
		// The custom metrics API has its own value (customMetrics.enabled).
		customMetrics := o.GetKind() == "APIService" || strings.Contains(o.GetName(), "custom-metrics")
		if strings.Contains(o.GetName(), "metrics") && !customMetrics {
			t.Errorf("metrics off, yet %s %s", o.GetKind(), o.GetName())
		}
	}
}

// TestSchemaRefusesBadValues checks that values.schema.json stops a bad
// value before anything is rendered, naming the value.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set, want string
	}{
		{"manager.replicas=0", "replicas"},
		{"webhook.certificate=vault", "certificate"},
		{"webhook.enable=maybe", "enable"},
		{"customMetrics.enabled=yes", "enabled"},
		{"manager.image.pullPolicy=Sometimes", "pullPolicy"},
		{"manager.image.tag=", "tag"},
		{"manager.replica=2", "replica"},
		{"manager.resources.limits.memory=lots", "memory"},
		{"manager.tolerations[0].operator=Maybe", "operator"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := helm(t, "template", "warmroute", chartDir, "--set", tc.set)
			if err == nil {
				t.Fatalf("--set %s rendered", tc.set)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--set %s: error does not name %q:\n%v", tc.set, tc.want, err)
			}
		})
	}
}
