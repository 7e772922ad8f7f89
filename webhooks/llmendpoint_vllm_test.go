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

package webhooks

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

func TestOlderThanSupported(t *testing.T) {
	for _, tt := range []struct {
		image        string
		older, known bool
	}{
		{"vllm/vllm-openai:v0.11.0", true, true},
		{"docker.io/vllm/vllm-openai:v0.17.1", true, true},
		{"registry.local:5000/mirror/vllm-openai:v0.9", true, true},
		{"vllm/vllm-openai:v0.18.0", false, true},
		{"vllm/vllm-openai:v0.30.0-cu129", false, true},
		{"vllm/vllm-openai:v1.0.0", false, true},
		{"vllm/vllm-openai:v0.11.0@sha256:0123", false, false}, // the digest decides
		{"vllm/vllm-openai@sha256:0123", false, false},
		{"vllm/vllm-openai", false, false},
		{"vllm/vllm-openai:latest", false, false},
		{"vllm/vllm-openai:nightly-abc", false, false},
		{"vllm/vllm-openai:v0.18.0rc1", false, false},
		{"registry.local:5000/vllm-openai", false, false},
		{"my/vllm:v0.11.0", false, false}, // not vLLM's image: its tag is the builder's
	} {
		older, known := OlderThanSupported(tt.image)
		if older != tt.older || known != tt.known {
			t.Errorf("%s: older %v known %v, want %v %v", tt.image, older, known, tt.older, tt.known)
		}
	}
}

func TestValidateVLLM(t *testing.T) {
	for _, tt := range []struct {
		name  string
		model servingv1alpha1.ModelSpec
		want  []string // the fields refused, and a phrase of the first message
		says  string
	}{
		{name: "defaults", model: servingv1alpha1.ModelSpec{}},
		{name: "supported image, collision-resistant hash, a rank vLLM has",
			model: servingv1alpha1.ModelSpec{Image: "vllm/vllm-openai:v0.18.0", MaxLoraRank: ptr.To[int32](320),
				Args: []string{"--prefix-caching-hash-algo=sha256_cbor", "--prefix_caching_hash_algo", "sha256"}}},
		{name: "old image", model: servingv1alpha1.ModelSpec{Image: "vllm/vllm-openai:v0.11.0"},
			want: []string{"spec.model.image"}, says: "v0.11.0 is older than v0.18.0"},
		{name: "rank vLLM refuses", model: servingv1alpha1.ModelSpec{MaxLoraRank: ptr.To[int32](10)},
			want: []string{"spec.model.maxLoraRank"}, says: `"1", "8", "16"`},
		{name: "weak hash, every spelling",
			model: servingv1alpha1.ModelSpec{Args: []string{
				"--gpu-memory-utilization=0.9",
				"--prefix-caching-hash-algo=xxhash",
				"--prefix_caching_hash_algo", "xxhash_cbor",
				"--prefix-caching-hash=xxhash", // argparse's abbreviation
				"--prefix-caching-hash-algo",   // no value: vLLM exits, the hash is not pinned
			}},
			want: []string{"spec.model.args[1]", "spec.model.args[2]", "spec.model.args[4]", "spec.model.args[5]"},
			says: `"xxhash" would weaken the hash`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateVLLM(tt.model, field.NewPath("spec", "model"))
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			if strings.Join(fields, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("refused %v, want %v (%v)", fields, tt.want, errs)
			}
			if tt.says != "" && !strings.Contains(errs[0].Error(), tt.says) {
				t.Errorf("%v does not say %q", errs[0], tt.says)
			}
		})
	}
}

// TestOperatorPassesTheUsersCollisionResistantHash: what the webhook lets
// through is what the operator passes, and what it refuses the operator
// overrides (its flag comes last) when the webhook is off.
func TestOperatorPassesTheUsersCollisionResistantHash(t *testing.T) {
	for args, want := range map[string]string{
		"":                                       "sha256",
		"--prefix-caching-hash-algo=sha256_cbor": "sha256_cbor",
		"--prefix-caching-hash-algo=xxhash":      "sha256",
		"--prefix-caching-hash-algo=sha256_cbor --prefix-caching-hash-algo=xxhash": "sha256",
	} {
		if got := servingv1alpha1.PrefixCachingHashAlgo(strings.Fields(args)); got != want {
			t.Errorf("args %q: operator passes %s, want %s", args, got, want)
		}
	}
}

// TestValidateRecordedImage: the recorded default image is refused, naming
// the annotation, when the pods would exit on it; the operator's own record
// and an empty one pass.
func TestValidateRecordedImage(t *testing.T) {
	for image, refused := range map[string]bool{
		"":                                   false,
		"docker.io/vllm/vllm-openai:v0.30.0": false,
		"docker.io/vllm/vllm-openai:v0.11.0": true,
	} {
		errs := validateRecordedImage(image)
		if (len(errs) > 0) != refused {
			t.Errorf("%q: refused %v, want refused=%v", image, errs, refused)
		}
		if refused && !strings.Contains(errs.ToAggregate().Error(), servingv1alpha1.AnnotationVLLMImage) {
			t.Errorf("%q: %v does not name the annotation", image, errs)
		}
	}
}
