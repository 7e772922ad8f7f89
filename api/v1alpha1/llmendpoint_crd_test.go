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

package v1alpha1_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// loadCRD reads the generated CRD.
func loadCRD(t *testing.T) apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "serving.warmroute.dev_llmendpoints.yaml"))
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("parse CRD: %v", err)
	}
	return crd
}

// loadSchema returns the generated CRD's v1alpha1 schema.
func loadSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	crd := loadCRD(t)
	for _, v := range crd.Spec.Versions {
		if v.Name == v1alpha1.GroupVersion.Version {
			return *v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("CRD has no version %s", v1alpha1.GroupVersion.Version)
	return apiextensionsv1.JSONSchemaProps{}
}

func field(t *testing.T, s apiextensionsv1.JSONSchemaProps, path ...string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	for _, p := range path {
		next, ok := s.Properties[p]
		if !ok {
			t.Fatalf("schema has no field %q (path %v)", p, path)
		}
		s = next
	}
	return s
}

// TestCRDBoundsMatchRoutingDocument keeps the literal kubebuilder markers in
// step with the routing document's constants, which the router enforces:
// a spec the API server accepts must give a document the router accepts.
func TestCRDBoundsMatchRoutingDocument(t *testing.T) {
	schema := loadSchema(t)
	prefixAware := []string{"spec", "routing", "prefixAware"}
	tests := []struct {
		name               string
		path               []string
		wantMin, wantMax   int
		wantDef            int
		wantDefaultPresent bool
	}{
		{
			name:    "prefixLength",
			path:    append(slices.Clone(prefixAware), "prefixLength"),
			wantMin: routing.MinPrefixLength, wantMax: routing.MaxPrefixLength,
			wantDef: routing.DefaultPrefixLength, wantDefaultPresent: true,
		},
		{
			// No schema default: the operator (and later a defaulting
			// webhook) fills it, possibly from other fields.
			name:    "concurrencyThreshold",
			path:    append(slices.Clone(prefixAware), "concurrencyThreshold"),
			wantMin: routing.MinConcurrencyThreshold, wantMax: routing.MaxConcurrencyThreshold,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := field(t, schema, tt.path...)
			if f.Minimum == nil || int(*f.Minimum) != tt.wantMin {
				t.Errorf("minimum = %v, want %d", f.Minimum, tt.wantMin)
			}
			if f.Maximum == nil || int(*f.Maximum) != tt.wantMax {
				t.Errorf("maximum = %v, want %d", f.Maximum, tt.wantMax)
			}
			switch {
			case tt.wantDefaultPresent && f.Default == nil:
				t.Errorf("no default, want %d", tt.wantDef)
			case tt.wantDefaultPresent && string(f.Default.Raw) != itoa(tt.wantDef):
				t.Errorf("default = %s, want %d", f.Default.Raw, tt.wantDef)
			case !tt.wantDefaultPresent && f.Default != nil:
				t.Errorf("default = %s, want none", f.Default.Raw)
			}
		})
	}
}

// TestCRDGracePeriodLeavesADrain: the CRD's minimum grace period is the
// preStop, the shortest drain and vLLM's exit margin.
func TestCRDGracePeriodLeavesADrain(t *testing.T) {
	f := field(t, loadSchema(t), "spec", "model", "terminationGracePeriodSeconds")
	if f.Minimum == nil || int(*f.Minimum) != v1alpha1.MinTerminationGracePeriodSeconds {
		t.Errorf("minimum = %v, want %d", f.Minimum, v1alpha1.MinTerminationGracePeriodSeconds)
	}
}

func TestCRDStrategiesMatchRoutingDocument(t *testing.T) {
	f := field(t, loadSchema(t), "spec", "routing", "strategy")
	var got []string
	for _, e := range f.Enum {
		var s string
		if err := yaml.Unmarshal(e.Raw, &s); err != nil {
			t.Fatalf("enum value %s: %v", e.Raw, err)
		}
		got = append(got, s)
		if !routing.Strategy(s).Valid() {
			t.Errorf("CRD strategy %q is unknown to the routing document", s)
		}
	}
	for _, s := range []v1alpha1.RoutingStrategy{v1alpha1.RoutingStrategyRandom, v1alpha1.RoutingStrategyLeastOutstandingRequests, v1alpha1.RoutingStrategyPrefixAware} {
		if !slices.Contains(got, string(s)) {
			t.Errorf("CRD enum %v lacks %q", got, s)
		}
	}
	if string(f.Default.Raw) != `"`+string(routing.StrategyPrefixAware)+`"` {
		t.Errorf("strategy default = %s, want %q", f.Default.Raw, routing.StrategyPrefixAware)
	}
}

func TestCRDScaleSubresource(t *testing.T) {
	crd := loadCRD(t)
	sc := crd.Spec.Versions[0].Subresources.Scale
	if sc == nil || sc.SpecReplicasPath != ".spec.replicas" || sc.StatusReplicasPath != ".status.replicas" || sc.LabelSelectorPath == nil || *sc.LabelSelectorPath != ".status.selector" {
		t.Errorf("scale subresource = %+v, want spec.replicas/status.replicas/status.selector", sc)
	}
	if !slices.Contains(crd.Spec.Names.ShortNames, "llme") {
		t.Errorf("short names %v lack llme", crd.Spec.Names.ShortNames)
	}
}

func itoa(i int) string {
	b, _ := yaml.Marshal(i)
	return string(b[:len(b)-1])
}

// The CRD says what the operator does when concurrencyThreshold is unset.
func TestCRDStatesTheThresholdDefault(t *testing.T) {
	d := strings.Join(strings.Fields(field(t, loadSchema(t), "spec", "routing", "prefixAware", "concurrencyThreshold").Description), " ")
	for _, want := range []string{
		itoa(int(v1alpha1.ConcurrencyPerGPU)) + " per GPU of an instance",
		itoa(int(v1alpha1.CPUConcurrency)) + " for instances without GPUs",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("concurrencyThreshold's description %q does not say %q", d, want)
		}
	}
	gpu := &v1alpha1.LLMEndpoint{Spec: v1alpha1.LLMEndpointSpec{Model: v1alpha1.ModelSpec{GPUs: ptrInt32(2)}}}
	cpu := &v1alpha1.LLMEndpoint{Spec: v1alpha1.LLMEndpointSpec{Model: v1alpha1.ModelSpec{GPUs: ptrInt32(0)}}}
	if got := v1alpha1.DefaultConcurrencyThreshold(gpu); got != 2*v1alpha1.ConcurrencyPerGPU {
		t.Errorf("2 GPUs: default %d", got)
	}
	if got := v1alpha1.DefaultConcurrencyThreshold(cpu); got != v1alpha1.CPUConcurrency {
		t.Errorf("no GPU: default %d", got)
	}
}

func ptrInt32(v int32) *int32 { return &v }
