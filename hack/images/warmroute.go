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
	"context"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultRefs are the references `make images` tags warmroute's images
// with: the Makefile's IMG, ROUTER_IMG, LORA_AGENT_IMG and SIM_IMG, and the
// router image the operator puts into pod specs by default (cmd/main.go's
// --router-image), which also runs the LoRA agent.
var DefaultRefs = Refs{
	Operator:  "ghcr.io/warmroute/warmroute-operator:v0.1.0",
	Router:    "ghcr.io/warmroute/warmroute-router:v0.1.0",
	LoRAAgent: "ghcr.io/warmroute/warmroute-lora-agent:v0.1.0",
	Simulator: "ghcr.io/warmroute/warmroute-vllmsim:v0.1.0",
}

// Refs names each of warmroute's images.
type Refs struct {
	Operator, Router, LoRAAgent, Simulator string
}

// Target is one of warmroute's images: which main packages go into it and
// the labels it carries.
type Target struct {
	// Name is the image's short name: its OCI layout is oci/<Name>.
	Name string
	Ref  string
	// Binaries are placed at /<Name>; the first is the entrypoint.
	Binaries []Binary
	// Env is the image's environment (KEY=value).
	Env []string
	// Title, Description: org.opencontainers.image.{title,description}.
	// Summary, LongDescription: the OpenShift/Red Hat "summary" and
	// "description" labels, as the Dockerfiles set them.
	Title, Description, Summary, LongDescription string
}

// Binary is a Go main package of this module and its name in the image.
type Binary struct {
	Name, Package string
}

// Targets are the images `make images` builds. The operator and router
// images carry the Dockerfiles' binaries and labels, so that an image from
// either path behaves the same; the router image also holds /lora-agent,
// which the operator runs from the router image by default.
func Targets(refs Refs) []Target {
	loraAgent := Binary{Name: "lora-agent", Package: "./sidecar/cmd/lora-agent"}
	return []Target{{
		Name:            "operator",
		Ref:             refs.Operator,
		Binaries:        []Binary{{Name: "manager", Package: "./cmd"}},
		Title:           "warmroute-operator",
		Description:     "Kubernetes operator that serves LLMs with vLLM behind a prefix-aware router",
		Summary:         "warmroute operator",
		LongDescription: "Turns LLMEndpoint resources into vLLM Deployments behind a prefix-aware router.",
	}, {
		Name:            "router",
		Ref:             refs.Router,
		Binaries:        []Binary{{Name: "router", Package: "./sidecar/cmd/router"}, loraAgent},
		Title:           "warmroute-router",
		Description:     "Prefix-aware router for vLLM fleets",
		Summary:         "warmroute router",
		LongDescription: "Routes each request to the vLLM instance whose prefix cache holds its prompt's beginning.",
	}, {
		Name:            "lora-agent",
		Ref:             refs.LoRAAgent,
		Binaries:        []Binary{loraAgent},
		Title:           "warmroute-lora-agent",
		Description:     "LoRA adapter agent for vLLM pods managed by warmroute",
		Summary:         "warmroute LoRA agent",
		LongDescription: "Loads and unloads one vLLM instance's LoRA adapters as the routing document places them, and reports what is loaded.",
	}, {
		Name: "vllmsim",
		Ref:  refs.Simulator,
		// A stand-in for vllm/vllm-openai: the operator runs `vllm serve
		// …` in the model image, found on PATH.
		Binaries:        []Binary{{Name: "vllm", Package: "./test/vllmsim/cmd/vllmsim"}},
		Env:             []string{"PATH=/"},
		Title:           "warmroute-vllmsim",
		Description:     "vLLM-compatible simulator for tests without GPUs",
		Summary:         "warmroute vLLM simulator",
		LongDescription: "Serves vLLM's HTTP surface with a simulated prefix cache, queueing and LoRA adapters, for tests and benchmarks on machines without GPUs.",
	}}
}

// Labels are the image config labels of t at version, the same keys the
// Dockerfiles set.
func (t Target) Labels(version string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       t.Title,
		"org.opencontainers.image.description": t.Description,
		"org.opencontainers.image.source":      "https://github.com/warmroute/warmroute",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     version,
		"name":                                 t.Title,
		"vendor":                               "warmroute",
		"version":                              version,
		"summary":                              t.Summary,
		"description":                          t.LongDescription,
	}
}

// BuildBinaries compiles the binaries of targets for linux/goarch from the
// module in moduleDir into BinDir(binDir, goarch), each package once (the
// LoRA agent is in two images).
func BuildBinaries(ctx context.Context, moduleDir, binDir, goarch string, targets []Target) error {
	built := map[Binary]bool{}
	names := map[string]string{}
	for _, t := range targets {
		for _, b := range t.Binaries {
			if built[b] {
				continue
			}
			if other, ok := names[b.Name]; ok {
				return fmt.Errorf("binaries %s and %s are both named %s", other, b.Package, b.Name)
			}
			names[b.Name] = b.Package
			built[b] = true
			if err := BuildGo(ctx, moduleDir, b.Package, "linux", goarch, filepath.Join(BinDir(binDir, goarch), b.Name)); err != nil {
				return fmt.Errorf("image %s: %w", t.Ref, err)
			}
		}
	}
	return nil
}

// BinDir is where BuildBinaries writes the binaries for goarch.
func BinDir(binDir, goarch string) string {
	return filepath.Join(binDir, "linux_"+goarch)
}

// Image is t's image for goarch from the binaries BuildBinaries wrote.
func (t Target) Image(binDir, goarch, version string) (v1.Image, error) {
	if len(t.Binaries) == 0 {
		return nil, fmt.Errorf("image %s: no binaries", t.Ref)
	}
	var paths []string
	for _, b := range t.Binaries {
		paths = append(paths, filepath.Join(BinDir(binDir, goarch), b.Name))
	}
	return FromBinary(Spec{
		Ref:    t.Ref,
		Binary: paths[0],
		Extra:  paths[1:],
		Labels: t.Labels(version),
		Env:    t.Env,
		Arch:   goarch,
	})
}
