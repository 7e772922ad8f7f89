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

// Command chartgen writes the Helm chart (dist/chart) from the output of
// `kustomize build config/default` followed by `kustomize build
// config/admission` (the LoRA agent's admission policy, cluster-scoped and
// so kept out of config/default) on its standard input, the way
// kubebuilder's helm plugin does: the objects are the kustomize ones, with
// the namespace, images, replicas, resources, scheduling and the webhook
// and metrics toggles turned into values. The chart is therefore
// regenerated, never edited, and `make verify-generated` fails when it
// differs from config/. Its output depends on its input and flags only.
//
//	{ kustomize build config/default; echo ---; kustomize build config/admission; } |
//		go run ./hack/chartgen --version 0.1.0 --out dist/chart
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/warmroute/warmroute/hack/manifests"
)

func main() {
	var opts Options
	var out string
	flag.StringVar(&opts.Version, "version", "", "chart version and appVersion (semver, without a leading v)")
	flag.StringVar(&out, "out", "dist/chart", "directory the chart is written to (replaced whole)")
	flag.Parse()
	if err := run(opts, out); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func run(opts Options, out string) error {
	files, err := Build(os.Stdin, opts)
	if err != nil {
		return err
	}
	// The chart is replaced whole.
	return manifests.Replace(out, files, ".")
}
