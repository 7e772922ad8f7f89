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
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// NonRoot is the user images run as unless their Spec names another:
// distroless's "nonroot", numeric so that the kubelet can check
// runAsNonRoot without reading /etc/passwd.
const NonRoot = "65532:65532"

// epoch is every timestamp in an image (files, config, history), so that the
// same binaries give the same digests on any machine, as ko does.
var epoch = time.Unix(0, 0).UTC()

// Spec describes an image holding static binaries on the minimal base.
type Spec struct {
	// Ref is the image reference the image is tagged with
	// ("ghcr.io/warmroute/warmroute-router:v0.1.0"); FromBinary does not use
	// it, WriteTarball and WriteLayout do.
	Ref string
	// Binary is the path of a static binary on this machine. It is placed
	// at /<base name> in the image.
	Binary string
	// Extra are more static binaries placed the same way, in the same layer
	// (the router image also carries the LoRA agent).
	Extra []string
	// Entrypoint defaults to ["/<base name of Binary>"].
	Entrypoint []string
	// Args is the image's Cmd: arguments after the entrypoint.
	Args []string
	// User defaults to NonRoot.
	User string
	// Labels are the image config's labels (org.opencontainers.image.*).
	Labels map[string]string
	// Env is KEY=value pairs.
	Env []string
	// Arch is the GOARCH the binaries were built for; it defaults to this
	// machine's. The OS is always linux.
	Arch string
}

// FromBinary returns the image of s: the base layer (see Base) and one
// layer with the binaries, owned by root and not writable by the user the
// image runs as.
func FromBinary(s Spec) (v1.Image, error) {
	if s.Binary == "" {
		return nil, fmt.Errorf("image %s: no binary", s.Ref)
	}
	arch := s.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	user := s.User
	if user == "" {
		user = NonRoot
	}
	entrypoint := s.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = []string{"/" + filepath.Base(s.Binary)}
	}

	var files []file
	seen := map[string]string{}
	for _, bin := range append([]string{s.Binary}, s.Extra...) {
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("image %s: read binary: %w", s.Ref, err)
		}
		name := filepath.Base(bin)
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("image %s: binaries %s and %s would both be /%s", s.Ref, other, bin, name)
		}
		seen[name] = bin
		files = append(files, file{name: name, mode: 0o755, data: data})
	}
	binLayer, err := layerOf(files)
	if err != nil {
		return nil, fmt.Errorf("image %s: binary layer: %w", s.Ref, err)
	}

	base, err := Base()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Ref, err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     binLayer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "warmroute hack/images: static binaries " + fmt.Sprint(sortedKeys(seen))},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: append binary layer: %w", s.Ref, err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", s.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS = "linux"
	cf.Architecture = arch
	if arch == "arm64" {
		cf.Variant = "v8"
	}
	cf.Config.User = user
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = s.Args
	cf.Config.Env = s.Env
	cf.Config.Labels = s.Labels
	cf.Config.WorkingDir = "/"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image %s: set config: %w", s.Ref, err)
	}
	return img, nil
}

// Base is the minimal base every image starts from: an empty image plus one
// layer with what a static Go binary reads from its file system:
//   - /etc/passwd and /etc/group with root and nonroot (65532), so that
//     os/user and tools that print user names resolve the image's user;
//   - /home/nonroot, its home directory, as in distroless;
//   - /etc/ssl/certs/ca-certificates.crt, the Mozilla roots pinned in go.mod
//     (golang.org/x/crypto/x509roots/fallback), for TLS to object stores and
//     other public endpoints (crypto/x509 reads this path on Linux).
//
// No /tmp: the workloads run with a read-only root file system and mount
// what they write.
func Base() (v1.Image, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	layer, err := layerOf([]file{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl", dir: true, mode: 0o755},
		{name: "etc/ssl/certs", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs},
		{name: "home", dir: true, mode: 0o755},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: 65532, gid: 65532},
		{name: "root", dir: true, mode: 0o700},
	})
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "warmroute hack/images: base (passwd, group, CA certificates)"},
	})
	if err != nil {
		return nil, fmt.Errorf("base image: %w", err)
	}
	return img, nil
}

// caBundle is the PEM file of the pinned Mozilla roots. Roots with a
// distrust-after date are left out: a PEM file cannot carry the constraint,
// and trusting them without it would trust certificates Mozilla no longer
// does.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, fmt.Errorf("encode CA bundle: %w", err)
		}
	}
	if buf.Len() == 0 {
		return nil, fmt.Errorf("CA bundle: no roots")
	}
	return buf.Bytes(), nil
}

type file struct {
	name     string // relative to /, no leading slash
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
}

// layerOf is a gzip-compressed OCI layer of files, in the given order
// (parents first), with fixed timestamps and numeric owners only.
func layerOf(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    path.Clean(f.name),
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: epoch,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
