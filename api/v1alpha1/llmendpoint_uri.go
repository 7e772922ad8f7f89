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

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Where the vLLM container finds weights stored on PersistentVolumeClaims.
// The model's claim is mounted at ModelMountPath; every claim an adapter
// names is mounted read-only at AdapterClaimMountPath(claim), its own path,
// so adapters may live on claims other than the model's. The LoRA agent
// downloads adapters from object storage into AdapterDownloadRoot, a
// volume of the pod that vLLM mounts read-only at the same path.
const (
	ModelMountPath      = "/mnt/models"
	AdapterMountRoot    = "/mnt/adapters"
	AdapterDownloadRoot = "/mnt/lora-downloads"
)

// WeightsSource is where a model's or an adapter's weights come from
// (spec.model.uri, spec.loraAdapters[].uri), parsed once for the
// controller, the webhook and the LoRA agent.
//
// +kubebuilder:object:generate=false
type WeightsSource struct {
	// Repo is the Hugging Face repository id ("org/model"), for hf:// and
	// bare ids.
	Repo string
	// Claim and Path are a pvc://claim/path URI's claim and the path within
	// it (no leading slash; empty for the claim's root).
	Claim, Path string
	// Local is an absolute path inside the image.
	Local string
	// Bucket is an s3://bucket/prefix URI's bucket; its prefix is Path.
	Bucket string
}

// ParseWeightsURI parses a weights URI: "org/model" or "hf://org/model",
// "pvc://claim/path", "s3://bucket/prefix" (adapters only), or an absolute
// path.
func ParseWeightsURI(uri string) (WeightsSource, error) {
	switch {
	case strings.HasPrefix(uri, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(uri, "s3://"), "/")
		if bucket == "" {
			return WeightsSource{}, fmt.Errorf("%q names no bucket", uri)
		}
		return WeightsSource{Bucket: bucket, Path: strings.Trim(prefix, "/")}, nil
	case strings.HasPrefix(uri, "pvc://"):
		claim, p, _ := strings.Cut(strings.TrimPrefix(uri, "pvc://"), "/")
		if msgs := validation.IsDNS1123Subdomain(claim); len(msgs) > 0 {
			return WeightsSource{}, fmt.Errorf("claim %q of %q is not a PersistentVolumeClaim name: %s", claim, uri, strings.Join(msgs, "; "))
		}
		p = strings.Trim(p, "/")
		if slices.Contains(strings.Split(p, "/"), "..") {
			return WeightsSource{}, fmt.Errorf("path of %q must stay inside the claim: no '..'", uri)
		}
		return WeightsSource{Claim: claim, Path: p}, nil
	case strings.HasPrefix(uri, "/"):
		return WeightsSource{Local: uri}, nil
	default:
		repo := strings.TrimPrefix(uri, "hf://")
		if repo == "" {
			return WeightsSource{}, errors.New("empty Hugging Face repository id")
		}
		return WeightsSource{Repo: repo}, nil
	}
}

// OnClaim is whether the weights live on a PersistentVolumeClaim.
func (s WeightsSource) OnClaim() bool { return s.Claim != "" }

// InObjectStore is whether the weights live in an S3 bucket, which the
// LoRA agent downloads before vLLM loads them.
func (s WeightsSource) InObjectStore() bool { return s.Bucket != "" }

// LoadPath is what vLLM is given to load the weights when the claim (if
// any) is mounted, or the bucket's prefix downloaded, at mount: the
// repository id, a path under mount, mount, or the local path.
func (s WeightsSource) LoadPath(mount string) string {
	switch {
	case s.Bucket != "":
		return mount
	case s.Claim != "":
		if s.Path == "" {
			return mount
		}
		return path.Join(mount, s.Path)
	case s.Local != "":
		return s.Local
	default:
		return s.Repo
	}
}

// AdapterClaimMountPath is where the vLLM container mounts an adapter claim.
func AdapterClaimMountPath(claim string) string { return path.Join(AdapterMountRoot, claim) }

// AdapterLoadPath is what vLLM's /v1/load_lora_adapter is given for an
// adapter URI (its lora_path).
func AdapterLoadPath(uri string) (string, error) {
	s, err := ParseWeightsURI(uri)
	if err != nil {
		return "", err
	}
	return s.LoadPath(AdapterClaimMountPath(s.Claim)), nil
}
