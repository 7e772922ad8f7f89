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

package images

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteTarball writes images, keyed by tag ("registry.k8s.io/pause:3.10.2"),
// into one docker-save style tarball at path: what `docker load`,
// `kind load image-archive` and containerd's `ctr -n k8s.io images import`
// read. Layers shared between images (the base) are stored once. The file
// appears complete or not at all.
func WriteTarball(path string, images map[string]v1.Image) error {
	if len(images) == 0 {
		return fmt.Errorf("write %s: no images", path)
	}
	refs := make(map[name.Reference]v1.Image, len(images))
	for ref, img := range images {
		// A tag, not a digest: docker-save tarballs name images by
		// RepoTags, and an image without one is imported unnamed.
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("write %s: image reference %q: %w", path, ref, err)
		}
		refs[tag] = img
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Index is the OCI image index of one image built for several platforms,
// each manifest's platform taken from its config.
func Index(images ...v1.Image) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("image index: config: %w", err)
		}
		p := cf.Platform()
		if p == nil {
			return nil, fmt.Errorf("image index: an image has no platform in its config")
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	// The order of manifests is part of the index digest.
	sort.SliceStable(adds, func(i, j int) bool {
		return adds[i].Platform.String() < adds[j].Platform.String()
	})
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	return mutate.AppendManifests(idx, adds...), nil
}

// WriteLayout replaces dir with an OCI image layout holding idx, annotated
// with ref (org.opencontainers.image.ref.name): what `crane push dir ref`
// pushes as one multi-platform image and what `ctr images import` reads.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	return nil
}
