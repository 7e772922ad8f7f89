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

// Package install_test checks the three ways to install warmroute that the
// README gives: the Helm chart (dist/chart) with bin/helm, and `make
// deploy` (kustomize build config/default, server-side apply), each against
// a real API server; the OLM bundle has its own tests in hack/bundlegen.
package install_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/warmroute/warmroute/test/localcluster"
)

var (
	repoRoot string
	chartDir string
)

func TestMain(m *testing.M) {
	var err error
	if repoRoot, err = localcluster.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	chartDir = filepath.Join(repoRoot, "dist", "chart")
	os.Exit(m.Run())
}

// tool is bin/<name>, which `make <name>` (and so `make test`) installs.
func tool(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot, "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make %s` (make test-unit installs it)", p, name)
	}
	return p
}

func helmBin(t *testing.T) string { return tool(t, "helm") }

// helm runs bin/helm with its own config, cache and data directories, so
// that the user's repositories and plugins play no part.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := filepath.Join(os.TempDir(), "warmroute-install-test-helm")
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decode reads a multi-document YAML stream; a document that does not
// parse, or lacks apiVersion, kind or name, fails the test.
func decode(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	yr := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var out []*unstructured.Unstructured
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read manifests: %v", err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("manifest does not parse: %v\n%s", err, doc)
		}
		if string(j) == "null" {
			continue // a template that rendered to nothing
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("manifest: %v\n%s", err, doc)
		}
		if o.GetAPIVersion() == "" || o.GetName() == "" {
			t.Fatalf("manifest without apiVersion or name:\n%s", doc)
		}
		out = append(out, o)
	}
}

// cluster is a real API server (etcd and kube-apiserver from the local
// control plane, as controllers/suite_test.go starts them) with an admin
// kubeconfig for helm and kubectl.
type cluster struct {
	cfg        *rest.Config
	kubeconfig string
	kubectl    string
	dyn        dynamic.Interface
	disc       discovery.DiscoveryInterface
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin, err := localcluster.BinDir()
	if err != nil {
		t.Fatalf("control plane binaries (hack/build-controlplane.sh): %v", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join("testdata", "cert-manager-crds.yaml")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{cfg: cfg, kubeconfig: filepath.Join(t.TempDir(), "kubeconfig"), kubectl: filepath.Join(bin, "kubectl")}
	if err := os.WriteFile(c.kubeconfig, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.disc, err = discovery.NewDiscoveryClientForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectlIn runs the control plane's kubectl with stdin.
func (c *cluster) kubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// get fetches o from the API server; nil when it does not exist.
func (c *cluster) get(t *testing.T, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	// A fresh mapper each time: CRDs come and go during the tests.
	groups, err := restmapper.GetAPIGroupResources(c.disc)
	if err != nil {
		t.Fatal(err)
	}
	gvk := o.GroupVersionKind()
	m, err := restmapper.NewDiscoveryRESTMapper(groups).RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %s: %v", gvk.Kind, o.GetName(), err)
	}
	var r dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		r = c.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	got, err := r.Get(context.Background(), o.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s %s: %v", gvk.Kind, o.GetName(), err)
	}
	return got
}

// requireAll fails unless every object exists.
func (c *cluster) requireAll(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if c.get(t, o) == nil {
			t.Errorf("%s %s/%s was not created", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
}

// requireGone fails when an object still exists and is not being deleted
// (a Namespace stays Terminating here: no namespace controller runs).
func (c *cluster) requireGone(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if got := c.get(t, o); got != nil && got.GetDeletionTimestamp() == nil {
			t.Errorf("%s %s/%s is still there after uninstalling", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
}

// endpoint is the support-bot sample's LLMEndpoint in namespace ns.
func endpoint(ns string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("serving.warmroute.dev/v1alpha1")
	o.SetKind("LLMEndpoint")
	o.SetNamespace(ns)
	o.SetName("support-bot")
	return o
}

// createEndpoint creates the support-bot sample in a new namespace, the
// way a user does.
func (c *cluster) createEndpoint(t *testing.T, ns string) {
	t.Helper()
	c.kubectlIn(t, "", "create", "namespace", ns)
	c.kubectlIn(t, "", "apply", "-n", ns, "-f", filepath.Join(repoRoot, "config", "samples", "serving_v1alpha1_llmendpoint_support_bot.yaml"))
	if c.get(t, endpoint(ns)) == nil {
		t.Fatal("the sample LLMEndpoint was not created")
	}
}
