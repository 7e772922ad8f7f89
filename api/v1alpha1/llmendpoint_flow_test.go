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
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/localcluster"
)

// startAPIServer runs a real kube-apiserver with the generated CRD and
// nothing else (no webhook), so that what it refuses or defaults is the
// CRD's own doing.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	binDir, err := localcluster.BinDir()
	if err != nil {
		t.Fatalf("control plane binaries: %v", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the API server (binaries in %q): %v", binDir, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// flowEndpoint is a valid endpoint with flow control on, changed by mutate.
func flowEndpoint(name string, mutate func(*v1alpha1.FlowControl)) *v1alpha1.LLMEndpoint {
	fc := &v1alpha1.FlowControl{Tenants: []v1alpha1.TenantFlowEntry{{Name: "team-a"}}}
	if mutate != nil {
		mutate(fc)
	}
	return &v1alpha1.LLMEndpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1alpha1.LLMEndpointSpec{
			Model:  v1alpha1.ModelSpec{Name: "m", URI: "org/m"},
			Router: v1alpha1.RouterSpec{FlowControl: fc},
		},
	}
}

// TestFlowControlCRD runs spec.router.flowControl through a real API
// server: each bound refused at one step past it, with one error that
// names the field and states the range, and admitted at the bound itself;
// and the schema's defaults are stored.
func TestFlowControlCRD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startAPIServer(t)

	// tenant and dflt edit tenants[0] and default.
	tenant := func(f func(*v1alpha1.TenantFlow)) func(*v1alpha1.FlowControl) {
		return func(fc *v1alpha1.FlowControl) { f(&fc.Tenants[0].TenantFlow) }
	}
	dflt := func(f func(*v1alpha1.TenantFlow)) func(*v1alpha1.FlowControl) {
		return func(fc *v1alpha1.FlowControl) { f(&fc.Default) }
	}
	i32 := func(v int) *int32 { return ptr.To(int32(v)) }
	i64 := func(v int64) *int64 { return ptr.To(v) }
	timeout := func(s string) func(*v1alpha1.FlowControl) {
		return func(fc *v1alpha1.FlowControl) {
			d, err := time.ParseDuration(s)
			if err != nil {
				panic(err)
			}
			fc.QueueTimeout = &metav1.Duration{Duration: d}
		}
	}
	// A bound's pair: the value at the bound is admitted, one past it is
	// refused.
	type bound struct {
		name           string
		atBound, past  func(*v1alpha1.FlowControl)
		field, message string
	}
	const tenants0, def = "spec.router.flowControl.tenants[0].", "spec.router.flowControl.default."
	weightRange := fmt.Sprintf("must be between %d and %d", routing.MinFlowWeight, routing.MaxFlowWeight)
	priorityRange := fmt.Sprintf("must be between %d and %d", routing.MinFlowPriority, routing.MaxFlowPriority)
	rpmRange := fmt.Sprintf("must be between 1 and %d", routing.MaxRequestsPerMinute)
	tpmRange := fmt.Sprintf("must be between 1 and %d", int64(routing.MaxTokensPerMinute))
	tenantQueueRange := fmt.Sprintf("must be between 0 and %d", routing.MaxTenantQueued)
	bounds := []bound{
		{"tenant weight, lowest", tenant(func(f *v1alpha1.TenantFlow) { f.Weight = i32(routing.MinFlowWeight) }), tenant(func(f *v1alpha1.TenantFlow) { f.Weight = i32(routing.MinFlowWeight - 1) }), tenants0 + "weight", weightRange},
		{"tenant weight, highest", tenant(func(f *v1alpha1.TenantFlow) { f.Weight = i32(routing.MaxFlowWeight) }), tenant(func(f *v1alpha1.TenantFlow) { f.Weight = i32(routing.MaxFlowWeight + 1) }), tenants0 + "weight", weightRange},
		{"default weight, lowest", dflt(func(f *v1alpha1.TenantFlow) { f.Weight = i32(routing.MinFlowWeight) }), dflt(func(f *v1alpha1.TenantFlow) { f.Weight = i32(routing.MinFlowWeight - 1) }), def + "weight", weightRange},
		{"priority, lowest", tenant(func(f *v1alpha1.TenantFlow) { f.Priority = i32(routing.MinFlowPriority) }), tenant(func(f *v1alpha1.TenantFlow) { f.Priority = i32(routing.MinFlowPriority - 1) }), tenants0 + "priority", priorityRange},
		{"priority, highest", dflt(func(f *v1alpha1.TenantFlow) { f.Priority = i32(routing.MaxFlowPriority) }), dflt(func(f *v1alpha1.TenantFlow) { f.Priority = i32(routing.MaxFlowPriority + 1) }), def + "priority", priorityRange},
		{"requests per minute, lowest", tenant(func(f *v1alpha1.TenantFlow) { f.RequestsPerMinute = i64(1) }), tenant(func(f *v1alpha1.TenantFlow) { f.RequestsPerMinute = i64(0) }), tenants0 + "requestsPerMinute", rpmRange},
		{"requests per minute, highest", tenant(func(f *v1alpha1.TenantFlow) { f.RequestsPerMinute = i64(routing.MaxRequestsPerMinute) }), tenant(func(f *v1alpha1.TenantFlow) { f.RequestsPerMinute = i64(routing.MaxRequestsPerMinute + 1) }), tenants0 + "requestsPerMinute", rpmRange},
		{"tokens per minute, lowest", dflt(func(f *v1alpha1.TenantFlow) { f.TokensPerMinute = i64(1) }), dflt(func(f *v1alpha1.TenantFlow) { f.TokensPerMinute = i64(0) }), def + "tokensPerMinute", tpmRange},
		{"tokens per minute, highest", tenant(func(f *v1alpha1.TenantFlow) { f.TokensPerMinute = i64(routing.MaxTokensPerMinute) }), tenant(func(f *v1alpha1.TenantFlow) { f.TokensPerMinute = i64(routing.MaxTokensPerMinute + 1) }), tenants0 + "tokensPerMinute", tpmRange},
		{"tenant queue, lowest (never queued)", tenant(func(f *v1alpha1.TenantFlow) { f.MaxQueued = i32(0) }), tenant(func(f *v1alpha1.TenantFlow) { f.MaxQueued = i32(-1) }), tenants0 + "maxQueued", tenantQueueRange},
		{"tenant queue, highest", dflt(func(f *v1alpha1.TenantFlow) { f.MaxQueued = i32(routing.MaxTenantQueued) }), dflt(func(f *v1alpha1.TenantFlow) { f.MaxQueued = i32(routing.MaxTenantQueued + 1) }), def + "maxQueued", tenantQueueRange},
		{"total queue, lowest", func(fc *v1alpha1.FlowControl) { fc.MaxQueued = i32(routing.MinQueued) }, func(fc *v1alpha1.FlowControl) { fc.MaxQueued = i32(routing.MinQueued - 1) }, "spec.router.flowControl.maxQueued", fmt.Sprintf("must be between %d and %d", routing.MinQueued, routing.MaxQueued)},
		{"total queue, highest", func(fc *v1alpha1.FlowControl) { fc.MaxQueued = i32(routing.MaxQueued) }, func(fc *v1alpha1.FlowControl) { fc.MaxQueued = i32(routing.MaxQueued + 1) }, "spec.router.flowControl.maxQueued", fmt.Sprintf("must be between %d and %d", routing.MinQueued, routing.MaxQueued)},
		{"queue timeout, shortest", timeout(fmt.Sprintf("%dms", routing.MinQueueTimeoutMillis)), timeout(fmt.Sprintf("%dms", routing.MinQueueTimeoutMillis-1)), "spec.router.flowControl.queueTimeout", "must be a duration between 100ms and 10m"},
		{"queue timeout, longest", timeout(fmt.Sprintf("%dms", routing.MaxQueueTimeoutMillis)), timeout(fmt.Sprintf("%dms", routing.MaxQueueTimeoutMillis+1)), "spec.router.flowControl.queueTimeout", "must be a duration between 100ms and 10m"},
		{"tenant name, longest", tenant0Name(strings.Repeat("a", routing.MaxTenantNameLength)), tenant0Name(strings.Repeat("a", routing.MaxTenantNameLength+1)), tenants0 + "name", fmt.Sprintf("may not be more than %d", routing.MaxTenantNameLength)},
		{"tenant name, shortest", tenant0Name("a"), tenant0Name(""), tenants0 + "name", "should be at least 1 chars long"},
		{"tenant name, printable ASCII", tenant0Name("team a/eu@x.y ~"), tenant0Name("team\ta"), tenants0 + "name", "must be printable ASCII and not start with '.'"},
		{"tenant name, hidden", tenant0Name("a.b"), tenant0Name(".a"), tenants0 + "name", "must be printable ASCII and not start with '.'"},
		{"tenants, most", tenantCount(routing.MaxFlowTenants), tenantCount(routing.MaxFlowTenants + 1), "spec.router.flowControl.tenants", fmt.Sprintf("must have at most %d items", routing.MaxFlowTenants)},
	}
	for _, b := range bounds {
		t.Run(b.name, func(t *testing.T) {
			if err := c.Create(ctx, flowEndpoint("at-bound", b.atBound), client.DryRunAll); err != nil {
				t.Errorf("at the bound: refused: %v", err)
			}
			err := c.Create(ctx, flowEndpoint("past-bound", b.past), client.DryRunAll)
			checkRefusal(t, err, b.field, b.message)
		})
	}

	t.Run("queue timeout that is no duration", func(t *testing.T) {
		for _, raw := range []string{"soon", "-1s", "1d", "30"} {
			e := flowEndpoint("no-duration", nil)
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e)
			if err != nil {
				t.Fatal(err)
			}
			// The Go type could not hold these; the user's YAML can.
			u["spec"].(map[string]any)["router"].(map[string]any)["flowControl"].(map[string]any)["queueTimeout"] = raw
			obj := &unstructured.Unstructured{Object: u}
			obj.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("LLMEndpoint"))
			checkRefusal(t, c.Create(ctx, obj, client.DryRunAll), "spec.router.flowControl.queueTimeout", "must be a duration between 100ms and 10m")
		}
	})

	t.Run("duplicate tenant", func(t *testing.T) {
		e := flowEndpoint("duplicate", func(fc *v1alpha1.FlowControl) {
			fc.Tenants = append(fc.Tenants, v1alpha1.TenantFlowEntry{Name: "team-a", TenantFlow: v1alpha1.TenantFlow{Weight: i32(2)}})
		})
		checkRefusal(t, c.Create(ctx, e, client.DryRunAll), "spec.router.flowControl.tenants[1]", `Duplicate value: {"name":"team-a"}`)
	})

	t.Run("defaults stored", func(t *testing.T) {
		e := flowEndpoint("defaults", func(fc *v1alpha1.FlowControl) {
			fc.Default = v1alpha1.TenantFlow{TokensPerMinute: i64(5000)}
			fc.Tenants = append(fc.Tenants, v1alpha1.TenantFlowEntry{Name: "batch", TenantFlow: v1alpha1.TenantFlow{Priority: i32(-100), MaxQueued: i32(0)}})
		})
		if err := c.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.LLMEndpoint{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(e), got); err != nil {
			t.Fatal(err)
		}
		want := &v1alpha1.FlowControl{
			Default: v1alpha1.TenantFlow{Weight: i32(1), Priority: i32(0), TokensPerMinute: i64(5000), MaxQueued: i32(100)},
			Tenants: []v1alpha1.TenantFlowEntry{
				{Name: "team-a", TenantFlow: v1alpha1.TenantFlow{Weight: i32(1), Priority: i32(0), MaxQueued: i32(100)}},
				{Name: "batch", TenantFlow: v1alpha1.TenantFlow{Weight: i32(1), Priority: i32(-100), MaxQueued: i32(0)}},
			},
			QueueTimeout: &metav1.Duration{Duration: 30 * time.Second},
			MaxQueued:    i32(1000),
		}
		if diff := cmp.Diff(want, got.Spec.Router.FlowControl); diff != "" {
			t.Errorf("stored flowControl (-want +got):\n%s", diff)
		}

		// Without flowControl nothing is defaulted into existence: flow
		// control stays off.
		off := flowEndpoint("off", nil)
		off.Spec.Router.FlowControl = nil
		if err := c.Create(ctx, off); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(off), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Router.FlowControl != nil {
			t.Errorf("an endpoint without flowControl got %+v", got.Spec.Router.FlowControl)
		}
	})

	t.Run("the sample", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "serving_v1alpha1_llmendpoint_flowcontrol.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		e := &v1alpha1.LLMEndpoint{}
		if err := yaml.UnmarshalStrict(raw, e); err != nil {
			t.Fatal(err)
		}
		e.Namespace = "default"
		if err := c.Create(ctx, e, client.DryRunAll); err != nil {
			t.Errorf("refused: %v", err)
		}
	})
}

// checkRefusal asserts that err is the API server refusing the object
// for one reason only, on field, with a message containing message: not
// two errors for one value (as a minimum marker beside a CEL rule would
// give).
func checkRefusal(t *testing.T, err error, field, message string) {
	t.Helper()
	if err == nil {
		t.Errorf("admitted; want %s refused", field)
		return
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok || !apierrors.IsInvalid(err) || status.Status().Details == nil {
		t.Errorf("error %v, want Invalid", err)
		return
	}
	var causes []metav1.StatusCause
	for _, c := range status.Status().Details.Causes {
		// A too long or too many value stops the API server before the
		// CEL rules, which it says in a cause of its own.
		if !strings.Contains(c.Message, "some validation rules were not checked") {
			causes = append(causes, c)
		}
	}
	if len(causes) != 1 || causes[0].Field != field || !strings.Contains(causes[0].Message, message) {
		t.Errorf("causes %+v, want one on %s containing %q", causes, field, message)
	}
	// What kubectl prints: the field's path and the message together.
	if !strings.Contains(err.Error(), field+": ") {
		t.Errorf("error %q does not start the reason with %s", err, field)
	}
}

func tenant0Name(name string) func(*v1alpha1.FlowControl) {
	return func(fc *v1alpha1.FlowControl) { fc.Tenants[0].Name = name }
}

func tenantCount(n int) func(*v1alpha1.FlowControl) {
	return func(fc *v1alpha1.FlowControl) {
		fc.Tenants = fc.Tenants[:0]
		for i := range n {
			fc.Tenants = append(fc.Tenants, v1alpha1.TenantFlowEntry{Name: fmt.Sprintf("tenant-%d", i)})
		}
	}
}
