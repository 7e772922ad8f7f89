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

// Command bundlegen writes the OLM bundle (bundle/manifests,
// bundle/metadata, bundle/tests/scorecard and bundle.Dockerfile) from the
// output of `kustomize build config/manifests` on its standard input. It
// does what `operator-sdk generate bundle` would, which cannot be installed
// here, and its output depends on its input and flags only, so that
// `make bundle` on an unchanged tree changes nothing.
//
//	kustomize build config/manifests | go run ./hack/bundlegen --version 0.1.0 --image IMG
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/warmroute/warmroute/hack/manifests"
)

func main() {
	var opts Options
	var channels, root string
	var related relatedImageFlags
	flag.StringVar(&opts.Package, "package", "warmroute", "OLM package name")
	flag.StringVar(&opts.Version, "version", "", "operator version (semver, without a leading v)")
	flag.StringVar(&opts.Image, "image", "", "operator image for the manager container (default: the one in the manifests)")
	flag.StringVar(&channels, "channels", "stable", "comma-separated update channels")
	flag.StringVar(&opts.DefaultChannel, "default-channel", "stable", "default update channel")
	flag.StringVar(&opts.Replaces, "replaces", "", "name of the CSV this version upgrades from (e.g. warmroute.v0.1.0)")
	flag.StringVar(&opts.OpenShiftVersions, "openshift-versions", "v4.17", "com.redhat.openshift.versions annotation")
	flag.StringVar(&root, "root", ".", "repository root the bundle is written under")
	flag.Var(&related, "related-image", "NAME=IMAGE: set the manager's RELATED_IMAGE_NAME (an operand image); repeatable")
	flag.Parse()
	opts.Channels = strings.Split(channels, ",")
	opts.RelatedImages = related

	if err := run(opts, root); err != nil {
		fmt.Fprintln(os.Stderr, "bundlegen:", err)
		os.Exit(1)
	}
}

// relatedImageFlags collects --related-image NAME=IMAGE.
type relatedImageFlags map[string]string

func (r *relatedImageFlags) String() string { return fmt.Sprint(map[string]string(*r)) }

func (r *relatedImageFlags) Set(v string) error {
	name, image, ok := strings.Cut(v, "=")
	if !ok || name == "" || image == "" {
		return fmt.Errorf("want NAME=IMAGE, got %q", v)
	}
	if *r == nil {
		*r = relatedImageFlags{}
	}
	(*r)[strings.ToUpper(name)] = image
	return nil
}

func run(opts Options, root string) error {
	files, err := Build(os.Stdin, opts)
	if err != nil {
		return err
	}
	return manifests.Replace(root, files, "bundle/manifests", "bundle/metadata", "bundle/tests")
}
