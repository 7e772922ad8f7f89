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

// Command images builds warmroute's images (the operator, the router, the
// LoRA agent and the vLLM simulator) without a container engine or a
// registry; `make images` runs it. It writes, under -out:
//
//	images.tar          the images for -local-arch, one docker-save tarball
//	                    for `ctr -n k8s.io images import` or
//	                    `kind load image-archive`
//	oci/<name>/         one OCI layout per image (operator, router,
//	                    lora-agent, vllmsim), an index over -platforms,
//	                    for `crane push oci/<name> <ref>`
//	bin/linux_<arch>/   the static binaries
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warmroute/warmroute/hack/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	refs := images.DefaultRefs
	var (
		moduleDir = flag.String("module", ".", "Directory of the warmroute Go module.")
		out       = flag.String("out", "bin/images", "Output directory.")
		version   = flag.String("version", "0.1.0", "Version in the images' labels.")
		platforms = flag.String("platforms", "linux/amd64,linux/arm64", "Comma-separated platforms of the OCI layouts (linux only).")
		localArch = flag.String("local-arch", runtime.GOARCH, "Architecture of the images in images.tar; must be one of -platforms.")
	)
	flag.StringVar(&refs.Operator, "operator", refs.Operator, "Operator image reference (IMG).")
	flag.StringVar(&refs.Router, "router", refs.Router, "Router image reference (ROUTER_IMG).")
	flag.StringVar(&refs.LoRAAgent, "lora-agent", refs.LoRAAgent, "LoRA agent image reference (LORA_AGENT_IMG).")
	flag.StringVar(&refs.Simulator, "simulator", refs.Simulator, "vLLM simulator image reference (SIM_IMG).")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	var arches []string
	for _, p := range strings.Split(*platforms, ",") {
		arch, ok := strings.CutPrefix(strings.TrimSpace(p), "linux/")
		if !ok || arch == "" || strings.Contains(arch, "/") {
			return fmt.Errorf("-platforms: %q is not linux/<arch>", p)
		}
		arches = append(arches, arch)
	}
	if !slices.Contains(arches, *localArch) {
		return fmt.Errorf("-local-arch %s is not in -platforms %s", *localArch, *platforms)
	}
	targets := images.Targets(refs)
	for _, t := range targets {
		if _, err := name.NewTag(t.Ref); err != nil {
			return fmt.Errorf("image reference %q: %w", t.Ref, err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	binDir := filepath.Join(*out, "bin")
	perTarget := make([][]v1.Image, len(targets))
	local := map[string]v1.Image{}
	for _, arch := range arches {
		fmt.Fprintf(os.Stderr, "images: building binaries for linux/%s\n", arch)
		if err := images.BuildBinaries(ctx, *moduleDir, binDir, arch, targets); err != nil {
			return err
		}
		for i, t := range targets {
			img, err := t.Image(binDir, arch, *version)
			if err != nil {
				return err
			}
			perTarget[i] = append(perTarget[i], img)
			if arch == *localArch {
				local[t.Ref] = img
			}
		}
	}

	tarPath := filepath.Join(*out, "images.tar")
	if err := images.WriteTarball(tarPath, local); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "images: wrote %s (linux/%s)\n", tarPath, *localArch)
	for i, t := range targets {
		idx, err := images.Index(perTarget[i]...)
		if err != nil {
			return fmt.Errorf("image %s: %w", t.Ref, err)
		}
		dir := filepath.Join(*out, "oci", t.Name)
		if err := images.WriteLayout(dir, t.Ref, idx); err != nil {
			return err
		}
		digest, err := idx.Digest()
		if err != nil {
			return fmt.Errorf("image %s: %w", t.Ref, err)
		}
		fmt.Printf("%s\t%s\t%s\n", t.Ref, digest, dir)
	}
	return nil
}
