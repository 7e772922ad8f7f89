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
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const testVersion = "0.1.0"

// dockerfileOf names the Dockerfile that builds the same image for users
// with Docker; images without one have no entry.
var dockerfileOf = map[string]string{
	"operator": "Dockerfile",
	"router":   "sidecar/Dockerfile.router",
}

// TestImages builds every image `make images` builds, for this machine's
// architecture, and checks what the kubelet and a user would see: a
// numeric non-root user, the labels, the entrypoint, static binaries that
// run, the base's passwd and CA roots; for the operator and router, the
// same labels, user, entrypoint and binaries as their Dockerfile. The
// images then go through WriteTarball and WriteLayout and are read back.
func TestImages(t *testing.T) {
	root := repoRoot(t)
	binDir := t.TempDir()
	targets := Targets(DefaultRefs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := BuildBinaries(ctx, root, binDir, runtime.GOARCH, targets); err != nil {
		t.Fatal(err)
	}

	built := map[string]v1.Image{}
	for _, target := range targets {
		t.Run(target.Name, func(t *testing.T) {
			img, err := target.Image(binDir, runtime.GOARCH, testVersion)
			if err != nil {
				t.Fatal(err)
			}
			built[target.Ref] = img
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
				t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
			}
			checkNonRootUser(t, cf.Config.User)
			if diff := cmp.Diff(target.Labels(testVersion), cf.Config.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			for k, v := range cf.Config.Labels {
				if v == "" {
					t.Errorf("label %s is empty", k)
				}
			}
			wantEntrypoint := []string{"/" + target.Binaries[0].Name}
			if !slices.Equal(cf.Config.Entrypoint, wantEntrypoint) {
				t.Errorf("entrypoint %q, want %q", cf.Config.Entrypoint, wantEntrypoint)
			}
			for _, e := range target.Env {
				if !slices.Contains(cf.Config.Env, e) {
					t.Errorf("environment %q lacks %s", cf.Config.Env, e)
				}
			}

			files := imageFiles(t, img)
			var binaries []string
			for _, b := range target.Binaries {
				binaries = append(binaries, "/"+b.Name)
				checkStaticBinary(t, files, "/"+b.Name)
			}
			checkBase(t, files)

			if df, ok := dockerfileOf[target.Name]; ok {
				want := dockerfileImage(t, filepath.Join(root, df), testVersion)
				got := dockerImage{Labels: cf.Config.Labels, User: cf.Config.User, Entrypoint: cf.Config.Entrypoint, Binaries: binaries}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("image differs from what %s builds (-Dockerfile +here):\n%s", df, diff)
				}
			}

			again, err := target.Image(binDir, runtime.GOARCH, testVersion)
			if err != nil {
				t.Fatal(err)
			}
			if d1, d2 := digest(t, img), digest(t, again); d1 != d2 {
				t.Errorf("the same binaries gave digests %s and %s", d1, d2)
			}
		})
	}
	if t.Failed() {
		return
	}

	t.Run("tarball", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "images.tar")
		if err := WriteTarball(path, built); err != nil {
			t.Fatal(err)
		}
		for ref, img := range built {
			tag, err := name.NewTag(ref)
			if err != nil {
				t.Fatal(err)
			}
			read, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatalf("read %s back from the tarball: %v", ref, err)
			}
			if got, want := configName(t, read), configName(t, img); got != want {
				t.Errorf("%s: config %s in the tarball, want %s", ref, got, want)
			}
			layers, err := read.Layers()
			if err != nil || len(layers) != 2 {
				t.Errorf("%s: %d layers in the tarball (%v), want base and binaries", ref, len(layers), err)
			}
		}
	})

	t.Run("layout", func(t *testing.T) {
		ref := DefaultRefs.Router
		idx, err := Index(built[ref])
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "router")
		if err := WriteLayout(dir, ref, idx); err != nil {
			t.Fatal(err)
		}
		read, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		top, err := read.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex ||
			top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != ref {
			t.Fatalf("layout index.json holds %+v, want one OCI index named %s", top.Manifests, ref)
		}
		inner, err := read.ImageIndex(top.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		im, err := inner.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil ||
			im.Manifests[0].Platform.OS != "linux" || im.Manifests[0].Platform.Architecture != runtime.GOARCH {
			t.Errorf("image index holds %+v, want one manifest for linux/%s", im.Manifests, runtime.GOARCH)
		}
	})
}

// TestFromBinaryRefusesTwoBinariesOfOneName: both would be /<name>, and
// one would silently hide the other.
func TestFromBinaryRefusesTwoBinariesOfOneName(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/tool", "b/tool"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := FromBinary(Spec{Ref: "example.com/tool:1", Binary: filepath.Join(dir, "a/tool"), Extra: []string{filepath.Join(dir, "b/tool")}})
	if err == nil || !strings.Contains(err.Error(), "would both be /tool") {
		t.Errorf("FromBinary with a/tool and b/tool: %v, want an error naming /tool", err)
	}
}

func checkNonRootUser(t *testing.T, user string) {
	t.Helper()
	uid, gid, ok := strings.Cut(user, ":")
	u, errU := strconv.Atoi(uid)
	_, errG := strconv.Atoi(gid)
	if !ok || errU != nil || errG != nil || u == 0 {
		t.Errorf("user %q, want numeric non-root uid:gid (the kubelet checks runAsNonRoot only on a numeric user)", user)
	}
}

type imageFile struct {
	hdr  *tar.Header
	data []byte
}

// imageFiles is the flattened file system of img, keyed by absolute path.
func imageFiles(t *testing.T, img v1.Image) map[string]imageFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read image file system: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: modification time %s, want the fixed %s", hdr.Name, hdr.ModTime, epoch)
		}
		files["/"+strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "/"), "/")] = imageFile{hdr, data}
	}
	return files
}

// checkStaticBinary: the file is a root-owned executable, an ELF for this
// architecture with no program interpreter (no libc needed), and it runs:
// -h prints its usage.
func checkStaticBinary(t *testing.T, files map[string]imageFile, path string) {
	t.Helper()
	f, ok := files[path]
	if !ok {
		t.Errorf("%s: not in the image", path)
		return
	}
	if f.hdr.Mode&0o111 == 0 || f.hdr.Mode&0o022 != 0 || f.hdr.Uid != 0 {
		t.Errorf("%s: mode %o uid %d, want executable, writable only by root", path, f.hdr.Mode, f.hdr.Uid)
	}
	e, err := elf.NewFile(bytes.NewReader(f.data))
	if err != nil {
		t.Errorf("%s: not an ELF file: %v", path, err)
		return
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has a program interpreter (dynamically linked)", path)
		}
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if e.Machine != wantMachine {
		t.Errorf("%s: machine %s, want %s", path, e.Machine, wantMachine)
	}

	exe := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(exe, f.data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-h")
	cmd.Env = []string{} // as in the image: nothing from this machine
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || !exit.Exited()) {
		t.Errorf("%s -h: %v\n%s", path, err, out)
		return
	}
	if !strings.Contains(string(out), "Usage") {
		t.Errorf("%s -h printed no usage:\n%s", path, out)
	}
}

// checkBase: the user the image runs as has a passwd entry, and the CA
// bundle parses.
func checkBase(t *testing.T, files map[string]imageFile) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^nonroot:x:65532:65532:`).Match(files["/etc/passwd"].data) {
		t.Errorf("/etc/passwd has no entry for 65532:\n%s", files["/etc/passwd"].data)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(files["/etc/ssl/certs/ca-certificates.crt"].data) {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt holds no certificate")
	}
	if _, ok := files["/tmp"]; ok {
		t.Errorf("/tmp in the image: the workloads mount what they write")
	}
}

// dockerImage is what a Dockerfile's final stage says about its image.
type dockerImage struct {
	Labels     map[string]string
	User       string
	Entrypoint []string
	Binaries   []string // destinations of COPY --from=builder
}

var labelPair = regexp.MustCompile(`([A-Za-z0-9_.-]+)="([^"]*)"`)

func dockerfileImage(t *testing.T, file, version string) dockerImage {
	t.Helper()
	img := dockerImage{Labels: map[string]string{}}
	for _, ins := range dockerInstructions(t, file) {
		keyword, rest, _ := strings.Cut(ins, " ")
		switch strings.ToUpper(keyword) {
		case "LABEL":
			for _, m := range labelPair.FindAllStringSubmatch(rest, -1) {
				img.Labels[m[1]] = strings.ReplaceAll(m[2], "${VERSION}", version)
			}
		case "USER":
			img.User = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &img.Entrypoint); err != nil {
				t.Fatalf("%s: %s: %v", file, ins, err)
			}
		case "COPY":
			args := strings.Fields(rest)
			if len(args) == 3 && args[0] == "--from=builder" {
				img.Binaries = append(img.Binaries, args[2])
			}
		}
	}
	return img
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBuildGoRefusesLibraryPackage: go build -o of a package that is not
// main writes its archive, which would make an image that cannot start.
func TestBuildGoRefusesLibraryPackage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "hrw")
	err := BuildGo(context.Background(), repoRoot(t), "./api/hrw", "linux", runtime.GOARCH, out)
	if err == nil || !strings.Contains(err.Error(), "not a main package") {
		t.Errorf("BuildGo(./api/hrw): %v, want an error saying it is not a main package", err)
	}
}

// TestDefaultRefsMatchWhatIsDeployed: the images `make images` tags are the
// ones the Makefile passes, the operator runs by default (its
// --router-image, also the LoRA agent's image) and config/ deploys, so that
// a cluster that imported images.tar runs them without a pull.
func TestDefaultRefsMatchWhatIsDeployed(t *testing.T) {
	root := repoRoot(t)
	read := func(file string) string {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	find := func(file, pattern string) string {
		m := regexp.MustCompile(pattern).FindStringSubmatch(read(file))
		if m == nil {
			t.Fatalf("%s: no match for %s", file, pattern)
		}
		return strings.Join(m[1:], ":")
	}
	for _, c := range []struct{ where, got, want string }{
		{"Makefile IMG", find("Makefile", `(?m)^IMG \?= (\S+)$`), DefaultRefs.Operator},
		{"Makefile ROUTER_IMG", find("Makefile", `(?m)^ROUTER_IMG \?= (\S+)$`), DefaultRefs.Router},
		{"Makefile LORA_AGENT_IMG", find("Makefile", `(?m)^LORA_AGENT_IMG \?= (\S+)$`), DefaultRefs.LoRAAgent},
		{"Makefile SIM_IMG", find("Makefile", `(?m)^SIM_IMG \?= (\S+)$`), DefaultRefs.Simulator},
		{"cmd/main.go defaultRouterImage", find("cmd/main.go", `defaultRouterImage\s*=\s*"([^"]+)"`), DefaultRefs.Router},
		{"config/manager RELATED_IMAGE_ROUTER", find("config/manager/manager.yaml", `RELATED_IMAGE_ROUTER\s+value: (\S+)`), DefaultRefs.Router},
		{"config/manager kustomization image", find("config/manager/kustomization.yaml", `newName: (\S+)\s+newTag: (\S+)`), DefaultRefs.Operator},
	} {
		if c.got != c.want {
			t.Errorf("%s is %s, but make images tags %s", c.where, c.got, c.want)
		}
	}
}
