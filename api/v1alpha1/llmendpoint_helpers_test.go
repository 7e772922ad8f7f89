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

package v1alpha1

import "testing"

func TestWeightsURIs(t *testing.T) {
	tests := []struct {
		uri            string
		model, adapter string // load paths; "" when refused
		claim          string
		wantErr        bool
	}{
		{uri: "org/a", model: "org/a", adapter: "org/a"},
		{uri: "hf://org/a", model: "org/a", adapter: "org/a"},
		{uri: "/opt/a", model: "/opt/a", adapter: "/opt/a"},
		{uri: "pvc://models/llama/8b", model: "/mnt/models/llama/8b", adapter: "/mnt/adapters/models/llama/8b", claim: "models"},
		{uri: "pvc://models", model: "/mnt/models", adapter: "/mnt/adapters/models", claim: "models"},
		{uri: "pvc://models/", model: "/mnt/models", adapter: "/mnt/adapters/models", claim: "models"},
		{uri: "pvc://adapters/a/../../etc", wantErr: true},
		{uri: "pvc://Bad_Claim/a", wantErr: true},
		{uri: "pvc:///a", wantErr: true},
		{uri: "hf://", wantErr: true},
	}
	for _, tt := range tests {
		src, err := ParseWeightsURI(tt.uri)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseWeightsURI(%q) error %v, want error %v", tt.uri, err, tt.wantErr)
			continue
		}
		if err != nil {
			if _, err := AdapterLoadPath(tt.uri); err == nil {
				t.Errorf("AdapterLoadPath(%q) accepted it", tt.uri)
			}
			continue
		}
		if src.Claim != tt.claim {
			t.Errorf("%q: claim %q, want %q", tt.uri, src.Claim, tt.claim)
		}
		if got := src.LoadPath(ModelMountPath); got != tt.model {
			t.Errorf("%q as the model: %q, want %q", tt.uri, got, tt.model)
		}
		if got, _ := AdapterLoadPath(tt.uri); got != tt.adapter {
			t.Errorf("%q as an adapter: %q, want %q", tt.uri, got, tt.adapter)
		}
	}
}

func TestShutdownTimeoutFitsTheGracePeriod(t *testing.T) {
	for _, grace := range []int64{MinTerminationGracePeriodSeconds, 60, DefaultTerminationGracePeriodSeconds, 3600} {
		e := &LLMEndpoint{}
		e.Spec.Model.TerminationGracePeriodSeconds = &grace
		d := ShutdownTimeoutSeconds(e)
		if d < MinShutdownTimeoutSeconds || PreStopSleepSeconds+d+ShutdownMarginSeconds != grace {
			t.Errorf("grace %d: drain %d does not fill preStop %d + drain + margin %d", grace, d, PreStopSleepSeconds, ShutdownMarginSeconds)
		}
	}
	if got := ShutdownTimeoutSeconds(&LLMEndpoint{}); got != DefaultTerminationGracePeriodSeconds-PreStopSleepSeconds-ShutdownMarginSeconds {
		t.Errorf("default drain %d", got)
	}
}

func TestDerivedDefaults(t *testing.T) {
	spec := func(replicas, gpus *int32) *LLMEndpoint {
		return &LLMEndpoint{Spec: LLMEndpointSpec{Replicas: replicas, Model: ModelSpec{GPUs: gpus}}}
	}
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name               string
		e                  *LLMEndpoint
		wantTP             *int32
		wantConcurrency    int32
		wantRouterReplicas int32
	}{
		{"CRD defaults (2 instances, 1 GPU)", spec(nil, nil), i32(1), 10, 2},
		{"CPU", spec(i32(1), i32(0)), nil, 4, 2},
		{"scaled to zero", spec(i32(0), i32(2)), i32(2), 20, 2},
		{"16 instances still 2 routers", spec(i32(16), i32(1)), i32(1), 10, 2},
		{"17 instances, 3 routers", spec(i32(17), i32(1)), i32(1), 10, 3},
		{"largest fleet", spec(i32(512), i32(16)), i32(16), 160, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DefaultTensorParallelSize(tt.e)
			if (got == nil) != (tt.wantTP == nil) || (got != nil && *got != *tt.wantTP) {
				t.Errorf("tensorParallelSize = %v, want %v", got, tt.wantTP)
			}
			if got := DefaultConcurrencyThreshold(tt.e); got != tt.wantConcurrency {
				t.Errorf("concurrencyThreshold = %d, want %d", got, tt.wantConcurrency)
			}
			if got := DefaultRouterReplicas(tt.e); got != tt.wantRouterReplicas {
				t.Errorf("router replicas = %d, want %d", got, tt.wantRouterReplicas)
			}
		})
	}
}

func TestCanonicalVLLMFlag(t *testing.T) {
	for arg, want := range map[string]string{
		"--max_model_len=4096":       "--max-model-len",
		"--no_enable_prefix_caching": "--no-enable-prefix-caching",
		"--api-key":                  "--api-key",
		"-tp":                        "-tp",
		"-tp=2":                      "-tp",
		"4096":                       "",
		"-":                          "",
		"--":                         "",
	} {
		if got := CanonicalVLLMFlag(arg); got != want {
			t.Errorf("CanonicalVLLMFlag(%q) = %q, want %q", arg, got, want)
		}
	}
}
