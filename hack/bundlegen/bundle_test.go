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

package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var repoRoot = filepath.Join("..", "..")

// kustomizeBuild is `kustomize build` of a directory of config/, through
// the same kustomize API (v0.20.1, kustomize v5.7.1) as bin/kustomize.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, "config", dir))
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// committedOptions are the options the committed bundle was generated
// with, read back from it, so that the Makefile stays their one source.
func committedOptions(t *testing.T) Options {
	t.Helper()
	b, err := manifests.GetBundleFromDir(filepath.Join(repoRoot, "bundle"))
	if err != nil {
		t.Fatalf("load the committed bundle: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "bundle", "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &ann); err != nil {
		t.Fatal(err)
	}
	csv := b.CSV
	return Options{
		Package:           ann.Annotations["operators.operatorframework.io.bundle.package.v1"],
		Version:           csv.Spec.Version.String(),
		Image:             csv.Annotations["containerImage"],
		Channels:          strings.Split(ann.Annotations["operators.operatorframework.io.bundle.channels.v1"], ","),
		DefaultChannel:    ann.Annotations["operators.operatorframework.io.bundle.channel.default.v1"],
		Replaces:          csv.Spec.Replaces,
		OpenShiftVersions: ann.Annotations["com.redhat.openshift.versions"],
	}
}

// `make bundle` on this tree must leave the committed bundle unchanged:
// the bundle is regenerated from config/ and compared file by file.
func TestCommittedBundleIsCurrent(t *testing.T) {
	files, err := Build(bytes.NewReader(kustomizeBuild(t, "manifests")), committedOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, f := range files {
		want[f.Path] = f.Content
	}
	var onDisk []string
	err = filepath.WalkDir(filepath.Join(repoRoot, "bundle"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		onDisk = append(onDisk, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	onDisk = append(onDisk, "bundle.Dockerfile")
	for _, p := range onDisk {
		got, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		w, ok := want[p]
		switch {
		case !ok:
			t.Errorf("%s is committed but no longer generated; run `make bundle`", p)
		case !bytes.Equal(got, w):
			t.Errorf("%s is stale; run `make bundle`", p)
		}
		delete(want, p)
	}
	for p := range want {
		t.Errorf("%s is generated but not committed; run `make bundle`", p)
	}
}

// The bundle passes operator-framework/api's validators — what
// `operator-sdk bundle validate --select-optional suite=operatorframework`
// runs — without an error or a warning.
func TestBundleValidates(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(repoRoot, "bundle"))
	if err != nil {
		t.Fatalf("load bundle: %v", err)
	}
	if b.CSV == nil || len(b.V1CRDs) == 0 {
		t.Fatalf("bundle has CSV %v and %d CRDs", b.CSV != nil, len(b.V1CRDs))
	}
	validators := map[string]interface {
		Validate(...interface{}) []errors.ManifestResult
	}{
		"bundle":                validation.BundleValidator,
		"ClusterServiceVersion": validation.ClusterServiceVersionValidator,
		"CRD":                   validation.CustomResourceDefinitionValidator,
		"OperatorHub":           validation.OperatorHubV2Validator,
		"standard capabilities": validation.StandardCapabilitiesValidator,
		"standard categories":   validation.StandardCategoriesValidator,
		"good practices":        validation.GoodPracticesValidator,
		"deprecated APIs":       validation.AlphaDeprecatedAPIsValidator,
		// The multiple-architectures validator is left out: it pulls the
		// images with docker, which has no engine here.
	}
	names := make([]string, 0, len(validators))
	for n := range validators {
		names = append(names, n)
	}
	slices.Sort(names)
	objs := append(b.ObjectsToValidate(), b)
	for _, name := range names {
		for _, res := range validators[name].Validate(objs...) {
			for _, e := range res.Errors {
				t.Errorf("%s validator: error: %s", name, e)
			}
			for _, w := range res.Warnings {
				if rbacOnlyRemovedAPIWarning(w.Error()) || metricsAPIExampleWarning(w.Error()) {
					t.Logf("%s validator: accepted: %s", name, w)
					continue
				}
				t.Errorf("%s validator: warning: %s", name, w)
			}
		}
	}
}

// The validators run on what the test gives them: a CSV broken in ways
// OperatorHub refuses must fail them.
func TestBundleValidatorsCatchABrokenCSV(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(repoRoot, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	b.CSV.Spec.MinKubeVersion = "next year"
	b.CSV.Spec.Provider.Name = ""
	var errs []string
	for _, res := range validation.OperatorHubV2Validator.Validate(b) {
		for _, e := range res.Errors {
			errs = append(errs, e.Error())
		}
	}
	joined := strings.Join(errs, "\n")
	for _, want := range []string{"MinKubeVersion", "Provider.Name"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no error about %s; errors:\n%s", want, joined)
		}
	}
}

// An object the bundle has no place for is an error, not a silent drop.
func TestBuildRefusesUnknownKinds(t *testing.T) {
	in := append(kustomizeBuild(t, "manifests"), []byte("---\napiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: stray\n")...)
	_, err := Build(bytes.NewReader(in), committedOptions(t))
	if err == nil || !strings.Contains(err.Error(), "PersistentVolume") {
		t.Fatalf("Build = %v, want an error naming PersistentVolume", err)
	}
}

// A bundle cannot carry the LoRA agent's ValidatingAdmissionPolicy
// (config/admission), so the CSV must say that it is required and how to
// apply it.
func TestCSVRequiresLoRAAgentPolicy(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(repoRoot, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ValidatingAdmissionPolicy", "`warmroute-lora-agent`", "config/admission", "LoRAAgentConfined=False"} {
		if !strings.Contains(b.CSV.Spec.Description, want) {
			t.Errorf("the CSV's description does not say %q", want)
		}
	}
	in := append(kustomizeBuild(t, "manifests"), append([]byte("---\n"), kustomizeBuild(t, "admission")...)...)
	if _, err := Build(bytes.NewReader(in), committedOptions(t)); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("Build with config/admission = %v, want an error naming ValidatingAdmissionPolicy", err)
	}
}

// Under OLM the cert-manager Secret mount would collide with the one OLM
// adds at the same path, so the bundle's Deployment must not have it.
func TestBundleDeploymentLeavesCertificatesToOLM(t *testing.T) {
	b, err := manifests.GetBundleFromDir(filepath.Join(repoRoot, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range b.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret != nil && (v.Secret.SecretName == certSecretVolume || v.Secret.SecretName == apiServiceCertSecret) {
				t.Errorf("Deployment %s mounts the cert-manager Secret %s", d.Name, v.Secret.SecretName)
			}
		}
	}
	if n := len(b.CSV.Spec.WebhookDefinitions); n != 2 {
		t.Errorf("%d webhook definitions, want the mutating and the validating one", n)
	}
	for _, w := range b.CSV.Spec.WebhookDefinitions {
		if w.DeploymentName == "" || w.TargetPort == nil || w.TargetPort.IntValue() != 9443 || w.WebhookPath == nil {
			t.Errorf("webhook %s: deployment %q, target port %v, path %v", w.GenerateName, w.DeploymentName, w.TargetPort, w.WebhookPath)
		}
	}
	// The custom metrics API is an owned API service: OLM makes its
	// APIService, Service, certificate and bindings, none of which the
	// bundle may ship itself.
	owned := b.CSV.Spec.APIServiceDefinitions.Owned
	if len(owned) != 1 || owned[0].Group != "custom.metrics.k8s.io" || owned[0].Version != "v1beta2" ||
		owned[0].DeploymentName == "" || owned[0].ContainerPort != 6443 {
		t.Errorf("owned API services %+v, want custom.metrics.k8s.io/v1beta2 on a deployment's port 6443", owned)
	}
	for _, o := range b.Objects {
		if o.GetKind() == "APIService" || strings.Contains(o.GetName(), "custom-metrics") {
			t.Errorf("the bundle ships %s %s, which OLM makes for the owned API service", o.GetKind(), o.GetName())
		}
	}
}

// metricsAPIExampleWarning reports whether w asks for an alm-example of
// the custom metrics API's MetricValueList. The API is read-only (the API
// server computes every value), so there is nothing a user would create
// from an example.
func metricsAPIExampleWarning(w string) bool {
	return strings.Contains(w, "custom.metrics.k8s.io/v1beta2, Kind=MetricValueList: provided API should have an example annotation")
}

// rbacVersionlessResources are resources whose v1beta1 APIs were removed in
// Kubernetes 1.25 but which warmroute uses at v1 (policy/v1
// PodDisruptionBudgets, discovery.k8s.io/v1 EndpointSlices). RBAC rules name
// a group and resource, never a version, so the deprecated-APIs check can
// only warn that such a rule "may" be for the removed version.
var rbacVersionlessResources = map[string]bool{"endpointslices": true, "poddisruptionbudgets": true}

var removedAPIRefs = regexp.MustCompile(`(\w+): \(\[(.*?)\]\)`)

// rbacOnlyRemovedAPIWarning reports whether w is that warning and nothing
// else: every resource it names is one of rbacVersionlessResources and every
// place it points at is an RBAC rule of the CSV. A removed API used by an
// object of the bundle is an error of the validator, not a warning, and
// still fails the test.
func rbacOnlyRemovedAPIWarning(w string) bool {
	_, list, ok := strings.Cut(w, "Migrate the API(s) for ")
	if !ok || !strings.Contains(w, "deprecated and removed in v1.25") {
		return false
	}
	refs := removedAPIRefs.FindAllStringSubmatch(list, -1)
	if len(refs) == 0 {
		return false
	}
	for _, ref := range refs {
		if !rbacVersionlessResources[ref[1]] {
			return false
		}
		for _, place := range strings.Split(ref[2], ",") {
			if !strings.Contains(place, ".Rules[") {
				return false
			}
		}
	}
	return true
}

func TestRBACOnlyRemovedAPIWarning(t *testing.T) {
	const head = "Warning: Value warmroute.v0.1.0: this bundle is using APIs which were deprecated and removed in v1.25. More info: https://kubernetes.io/docs/reference/using-api/deprecation-guide/#v1-25. Migrate the API(s) for "
	for _, tc := range []struct {
		w    string
		want bool
	}{
		{head + `endpointslices: (["ClusterServiceVersion.Spec.InstallStrategy.StrategySpec.ClusterPermissions[0].Rules[4]"]),`, true},
		{head + `poddisruptionbudgets: (["ClusterServiceVersion.Spec.InstallStrategy.StrategySpec.ClusterPermissions[0].Rules[6]"]),`, true},
		{head + `cronjobs: (["ClusterServiceVersion.Spec.InstallStrategy.StrategySpec.ClusterPermissions[0].Rules[1]"]),`, false},
		{head + `poddisruptionbudgets: (["my-pdb"]),`, false},
		{"some other warning", false},
	} {
		if got := rbacOnlyRemovedAPIWarning(tc.w); got != tc.want {
			t.Errorf("rbacOnlyRemovedAPIWarning(%q) = %v, want %v", tc.w, got, tc.want)
		}
	}
}
