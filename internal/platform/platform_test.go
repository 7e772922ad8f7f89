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

package platform_test

import (
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/warmroute/warmroute/internal/platform"
	"github.com/warmroute/warmroute/test/localcluster"
)

// A real API server is Kubernetes until it serves OpenShift's
// SecurityContextConstraints (here as a CRD of the same group and kind).
func TestDetect(t *testing.T) {
	cfg := localcluster.APIServer(t)
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	if got, err := platform.Detect(dc); err != nil || got != platform.Kubernetes {
		t.Fatalf("plain API server: %q, %v; want %q", got, err, platform.Kubernetes)
	}

	scc := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "securitycontextconstraints." + platform.SecurityGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: platform.SecurityGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "securitycontextconstraints", Singular: "securitycontextconstraints", Kind: "SecurityContextConstraints", ListKind: "SecurityContextConstraintsList"},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTrue(),
				}},
			}},
		},
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{scc}}); err != nil {
		t.Fatalf("install the SCC CRD: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := platform.Detect(dc)
		if err == nil && got == platform.OpenShift {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("with %s served: %q, %v; want %q", platform.SecurityGroup, got, err, platform.OpenShift)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptrTrue() *bool { b := true; return &b }
