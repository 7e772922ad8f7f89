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
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var endpointCRD = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1",
	"kind":       "CustomResourceDefinition",
	"metadata":   map[string]any{"name": "llmendpoints.serving.warmroute.dev"},
}}

// TestInstalls installs, upgrades and uninstalls warmroute on a real API
// server, with Helm and with `make deploy`'s kustomize and server-side
// apply: every object must be accepted, an upgrade must keep existing
// LLMEndpoints, and an uninstall must remove every operator object. No
// operator runs: acceptance by the API server is what is checked. The two
// share the cluster one after the other (their cluster-scoped objects have
// the same names).
func TestInstalls(t *testing.T) {
	helmBin(t) // fail early, before starting the API server
	tool(t, "kustomize")
	c := startCluster(t)
	t.Run("helm", func(t *testing.T) { testHelm(t, c) })
	t.Run("kustomize", func(t *testing.T) { testKustomize(t, c) })
}

func testHelm(t *testing.T, c *cluster) {
	const ns = "warmroute-helm"
	h := func(args ...string) string {
		t.Helper()
		return mustHelm(t, append(args, "--kubeconfig", c.kubeconfig, "--namespace", ns)...)
	}
	manifest := func() []*unstructured.Unstructured {
		t.Helper()
		return decode(t, h("get", "manifest", "warmroute"))
	}

	// First without webhooks: nothing serves them here, and with them on
	// the API server would refuse the LLMEndpoint created below.
	h("install", "warmroute", chartDir, "--create-namespace", "--set", "webhook.enable=false")
	c.requireAll(t, manifest())
	if c.get(t, endpointCRD) == nil {
		t.Fatal("helm install did not create the CRD from crds/")
	}
	c.createEndpoint(t, "apps-helm")
	ep := endpoint("apps-helm")

	// Upgrade to the webhooks with the self-signed certificate: the new
	// objects are accepted, the endpoint is kept.
	h("upgrade", "warmroute", chartDir, "--set", "webhook.certificate=self-signed")
	objs := manifest()
	c.requireAll(t, objs)
	if c.get(t, ep) == nil {
		t.Fatal("helm upgrade lost the LLMEndpoint")
	}
	// The self-signed certificates of the webhooks and the custom metrics API.
	ca := func(name string) string {
		t.Helper()
		secret := &unstructured.Unstructured{}
		secret.SetAPIVersion("v1")
		secret.SetKind("Secret")
		secret.SetNamespace(ns)
		secret.SetName(name)
		got := c.get(t, secret)
		if got == nil {
			t.Fatalf("no self-signed certificate Secret %s", name)
		}
		v, _, _ := unstructured.NestedString(got.Object, "data", "ca.crt")
		return v
	}
	secrets := []string{"webhook-server-cert", "custom-metrics-server-cert"}
	first := map[string]string{}
	for _, name := range secrets {
		first[name] = ca(name)
	}

	// Upgrading again keeps the certificates (looked up, not reissued).
	h("upgrade", "warmroute", chartDir, "--set", "webhook.certificate=self-signed", "--set", "manager.replicas=1")
	for _, name := range secrets {
		if ca(name) != first[name] {
			t.Errorf("helm upgrade reissued the self-signed certificate %s", name)
		}
	}

	// And to cert-manager, the default values.
	h("upgrade", "warmroute", chartDir)
	objs = append(objs, manifest()...)
	c.requireAll(t, manifest())
	if c.get(t, ep) == nil {
		t.Fatal("helm upgrade lost the LLMEndpoint")
	}

	h("uninstall", "warmroute")
	c.requireGone(t, objs)
	if c.get(t, endpointCRD) == nil || c.get(t, ep) == nil {
		t.Error("helm uninstall removed the CRD or the LLMEndpoint; Helm keeps crds/")
	}

	// Leave the CRD out for the kustomize install (this waits until the
	// API server has removed it and its LLMEndpoints).
	c.kubectlIn(t, "", "delete", "crd", endpointCRD.GetName())
}

// testKustomize is `make install`, `make deploy` (twice: the second is an
// upgrade to a new image) and `make undeploy`, with bin/kustomize and the
// control plane's kubectl.
func testKustomize(t *testing.T, c *cluster) {
	build := func(dir string) string {
		t.Helper()
		out, err := exec.Command(tool(t, "kustomize"), "build", filepath.Join(repoRoot, "config", dir)).Output()
		if err != nil {
			t.Fatalf("kustomize build config/%s: %v", dir, err)
		}
		return string(out)
	}
	apply := func(manifests string) {
		t.Helper()
		c.kubectlIn(t, manifests, "apply", "--server-side", "-f", "-")
	}

	// make install, then an endpoint, before the webhooks exist.
	apply(build("crd"))
	c.createEndpoint(t, "apps-kustomize")
	ep := endpoint("apps-kustomize")

	deploy := build("default")
	apply(deploy)
	objs := decode(t, deploy)
	c.requireAll(t, objs)

	// make deploy IMG=…v0.2.0: an upgrade in place.
	const newImage = "ghcr.io/warmroute/warmroute-operator:v0.2.0"
	upgraded := strings.ReplaceAll(deploy, "ghcr.io/warmroute/warmroute-operator:v0.1.0", newImage)
	if upgraded == deploy {
		t.Fatal("config/default does not use the operator image v0.1.0; update the test")
	}
	apply(upgraded)
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		got := c.get(t, o)
		containers, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "spec", "containers")
		if img := containers[0].(map[string]any)["image"]; img != newImage {
			t.Errorf("after the upgrade the manager runs %v, want %s", img, newImage)
		}
	}
	if c.get(t, ep) == nil {
		t.Fatal("make deploy lost the LLMEndpoint")
	}

	// make undeploy removes everything it applied, the CRD (and so every
	// LLMEndpoint) included; --wait=false because no namespace controller
	// runs here to finish the Namespace.
	c.kubectlIn(t, upgraded, "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	c.requireGone(t, objs)
}
