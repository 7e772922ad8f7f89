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
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// OldestVLLMRelease is the oldest vLLM release the operator supports: the
// first whose `vllm serve` accepts every flag the operator passes. The
// newest of them is --shutdown-timeout (v0.18.0); --prefix-caching-hash-algo
// with sha256, the LoRA flags and the rest are older.
const OldestVLLMRelease = "v0.18.0"

// releaseTag is a vLLM image tag that names a release: v0.18.0, v0.18.1,
// v0.30.0-cu129. Pre-releases (v0.18.0rc1), nightly and custom tags do not.
var releaseTag = regexp.MustCompile(`^v(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$`)

// OlderThanSupported reports whether image is a vLLM release older than
// OldestVLLMRelease, and whether the operator can tell at all: it can for
// vLLM's own images (a repository named vllm-openai*, mirrors included)
// tagged with a release. An image pinned by digest, a custom image or tag
// it cannot read, and it lets through.
func OlderThanSupported(image string) (older, known bool) {
	if strings.Contains(image, "@") {
		return false, false // the digest, not the tag, says what runs
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return false, false // no tag (latest)
	}
	repo, tag := image[:i], image[i+1:]
	if !strings.HasPrefix(path.Base(repo), "vllm-openai") {
		return false, false
	}
	v, ok := releaseVersion(tag)
	if !ok {
		return false, false
	}
	oldest, _ := releaseVersion(OldestVLLMRelease)
	return slices.Compare(v, oldest) < 0, true
}

// releaseVersion is a release tag's (major, minor, patch).
func releaseVersion(tag string) ([]int, bool) {
	m := releaseTag.FindStringSubmatch(tag)
	if m == nil {
		return nil, false
	}
	v := make([]int, 3)
	for i, s := range m[1:4] {
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, false
		}
		v[i] = n
	}
	return v, true
}

// maxLoRARanks are the values vLLM's --max-lora-rank accepts (its
// MaxLoRARanks choices, the same from v0.18.0 to the pinned release); the
// CRD's 1–512 range lets others through, on which every pod would exit.
var maxLoRARanks = []int32{1, 8, 16, 32, 64, 128, 256, 320, 512}

// validateVLLM refuses what would make `vllm serve` exit or weaken tenant
// isolation: an image older than the oldest supported release, a maxLoraRank
// vLLM does not accept, and a prefix-caching hash that is not
// collision-resistant.
func validateVLLM(m servingv1alpha1.ModelSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if older, _ := OlderThanSupported(m.Image); older {
		errs = append(errs, field.Invalid(p.Child("image"), m.Image,
			fmt.Sprintf("vLLM %s is older than %s, the oldest release the operator supports: it refuses --shutdown-timeout, which every vLLM pod is started with, so every pod would exit; use %s or later, or leave spec.model.image empty for the operator's pinned release",
				m.Image[strings.LastIndex(m.Image, ":")+1:], OldestVLLMRelease, OldestVLLMRelease)))
	}
	if r := m.MaxLoraRank; r != nil && !slices.Contains(maxLoRARanks, *r) {
		errs = append(errs, field.NotSupported(p.Child("maxLoraRank"), *r, ranksAsStrings()))
	}
	for _, a := range servingv1alpha1.PrefixCachingHashAlgoArgs(m.Args) {
		if slices.Contains(servingv1alpha1.CollisionResistantHashAlgos, a.Value) {
			continue
		}
		errs = append(errs, field.Invalid(p.Child("args").Index(a.Index), m.Args[a.Index],
			fmt.Sprintf("--prefix-caching-hash-algo %q would weaken the hash of vLLM's prefix cache blocks: tenants sharing an instance are kept apart by salts in those hashes, so the operator pins a collision-resistant one; use %s, or leave the flag out (the operator passes %s)",
				a.Value, strings.Join(servingv1alpha1.CollisionResistantHashAlgos, " or "), servingv1alpha1.CollisionResistantHashAlgos[0])))
	}
	return errs
}

// validateRecordedImage refuses a recorded default vLLM image (the
// annotation the operator writes and a user may edit) that the pods would
// exit on, as validateVLLM refuses spec.model.image.
func validateRecordedImage(image string) field.ErrorList {
	if older, _ := OlderThanSupported(image); !older {
		return nil
	}
	p := field.NewPath("metadata", "annotations").Key(servingv1alpha1.AnnotationVLLMImage)
	return field.ErrorList{field.Invalid(p, image, fmt.Sprintf(
		"vLLM older than %s, the oldest release the operator supports (every vLLM pod is started with --shutdown-timeout); remove the annotation to run the operator's pinned release", OldestVLLMRelease))}
}

func ranksAsStrings() []string {
	out := make([]string, len(maxLoRARanks))
	for i, r := range maxLoRARanks {
		out[i] = strconv.Itoa(int(r))
	}
	return out
}
