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
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestBuildFlowControl(t *testing.T) {
	// defaults is an entry with every field at its default.
	defaults := routing.TenantLimits{Weight: 1, Priority: 0, MaxQueued: 100}
	tests := []struct {
		name string
		in   *v1alpha1.FlowControl
		want *routing.FlowControl
	}{{
		name: "unset: flow control off, no field in the document",
		in:   nil,
		want: nil,
	}, {
		name: "empty: every default filled in, as the schema would",
		in:   &v1alpha1.FlowControl{},
		want: &routing.FlowControl{Default: defaults, QueueTimeoutMillis: 30_000, MaxQueued: 1000},
	}, {
		name: "a listed tenant's unset fields take the field defaults, not the default entry's",
		in: &v1alpha1.FlowControl{
			Default: v1alpha1.TenantFlow{Weight: ptr.To[int32](5), Priority: ptr.To[int32](-3), RequestsPerMinute: ptr.To[int64](60), MaxQueued: ptr.To[int32](0)},
			Tenants: []v1alpha1.TenantFlowEntry{{Name: "team-a"}},
		},
		want: &routing.FlowControl{
			Default:            routing.TenantLimits{Weight: 5, Priority: -3, RequestsPerMinute: 60, MaxQueued: 0},
			Tenants:            map[string]routing.TenantLimits{"team-a": defaults},
			QueueTimeoutMillis: 30_000, MaxQueued: 1000,
		},
	}, {
		name: "every field set, at the API's bounds",
		in: &v1alpha1.FlowControl{
			Default: v1alpha1.TenantFlow{Weight: ptr.To[int32](1000), Priority: ptr.To[int32](1000), RequestsPerMinute: ptr.To[int64](10_000_000), TokensPerMinute: ptr.To[int64](10_000_000_000), MaxQueued: ptr.To[int32](10_000)},
			Tenants: []v1alpha1.TenantFlowEntry{
				{Name: "b", TenantFlow: v1alpha1.TenantFlow{Weight: ptr.To[int32](1), Priority: ptr.To[int32](-1000), RequestsPerMinute: ptr.To[int64](1), TokensPerMinute: ptr.To[int64](1), MaxQueued: ptr.To[int32](0)}},
				{Name: "a b", TenantFlow: v1alpha1.TenantFlow{Weight: ptr.To[int32](2)}},
			},
			QueueTimeout: &metav1.Duration{Duration: 100 * time.Millisecond},
			MaxQueued:    ptr.To[int32](100_000),
		},
		want: &routing.FlowControl{
			Default: routing.TenantLimits{Weight: 1000, Priority: 1000, RequestsPerMinute: 10_000_000, TokensPerMinute: 10_000_000_000, MaxQueued: 10_000},
			Tenants: map[string]routing.TenantLimits{
				"b":   {Weight: 1, Priority: -1000, RequestsPerMinute: 1, TokensPerMinute: 1, MaxQueued: 0},
				"a b": {Weight: 2, MaxQueued: 100},
			},
			QueueTimeoutMillis: 100, MaxQueued: 100_000,
		},
	}, {
		name: "the longest queue timeout",
		in:   &v1alpha1.FlowControl{QueueTimeout: &metav1.Duration{Duration: 10 * time.Minute}},
		want: &routing.FlowControl{Default: defaults, QueueTimeoutMillis: 600_000, MaxQueued: 1000},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := newEndpoint(func(ep *v1alpha1.LLMEndpoint) { ep.Spec.Router.FlowControl = tt.in })
			before := ep.DeepCopy()
			doc := buildRoutingDocument(ep, nil, nil, time.Now())
			if diff := cmp.Diff(before, ep); diff != "" {
				t.Fatalf("the builder changed the LLMEndpoint:\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, doc.FlowControl); diff != "" {
				t.Errorf("flowControl (-want +got):\n%s", diff)
			}
			// What the routers read: the encoded document, decoded
			// strictly and validated, gives the same values back.
			data, err := doc.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got, err := routing.Decode(data)
			if err != nil {
				t.Fatalf("the router would refuse the document: %v\n%s", err, data)
			}
			if diff := cmp.Diff(tt.want, got.FlowControl); diff != "" {
				t.Errorf("decoded flowControl (-want +got):\n%s", diff)
			}
			if tt.in == nil && bytes.Contains(data, []byte("flowControl")) {
				t.Errorf("without flow control the document mentions it (routers older than the field would refuse it):\n%s", data)
			}
		})
	}
}

// TestFlowControlSampleDocument pins, byte for byte, the routing document
// the operator writes for config/samples' flow-control endpoint (two teams
// and a batch job): what the routers read, defaults filled in.
// go test ./controllers -run TestFlowControlSampleDocument -update
// rewrites it.
func TestFlowControlSampleDocument(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "config", "samples", "serving_v1alpha1_llmendpoint_flowcontrol.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ep := &v1alpha1.LLMEndpoint{}
	if err := yaml.UnmarshalStrict(raw, ep); err != nil {
		t.Fatalf("sample: %v", err)
	}
	ep.Namespace, ep.UID, ep.Generation = "team", "0b5d6c1e-uid", 1
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	doc := buildRoutingDocument(ep, nil, nil, now)
	data, err := doc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routing.Decode(data); err != nil {
		t.Fatalf("the router would refuse the document: %v", err)
	}
	checkGoldenBytes(t, filepath.Join("testdata", "routing-document", "flowcontrol-sample.json"), data)
}
