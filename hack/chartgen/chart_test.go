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

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// configDefault is what `make chart` feeds chartgen: config/default, then
// config/admission.
func configDefault(t *testing.T) []byte {
	t.Helper()
	var out []byte
	for _, dir := range []string{"default", "admission"} {
		res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join("..", "..", "config", dir))
		if err != nil {
			t.Fatal(err)
		}
		y, err := res.AsYaml()
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, "---\n"...), y...)
	}
	return out
}

// TestCommittedChartIsCurrent is `make chart` followed by a diff: the
// committed dist/chart must be what config/ generates.
func TestCommittedChartIsCurrent(t *testing.T) {
	files, err := Build(bytes.NewReader(configDefault(t)), Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	var generated []string
	for _, f := range files {
		generated = append(generated, f.Path)
		committed, err := os.ReadFile(filepath.Join("..", "..", "dist", "chart", f.Path))
		if err != nil || !bytes.Equal(committed, f.Content) {
			t.Errorf("dist/chart/%s is not what config/ generates; run `make chart`", f.Path)
		}
	}
	_ = filepath.WalkDir(filepath.Join("..", "..", "dist", "chart"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join("..", "..", "dist", "chart"), p)
			if !slices.Contains(generated, filepath.ToSlash(rel)) {
				t.Errorf("dist/chart/%s is no longer generated; run `make chart`", rel)
			}
		}
		return nil
	})
}

func TestUnknownKindIsRefused(t *testing.T) {
	in := append(configDefault(t), []byte("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: warmroute-extra\n  namespace: warmroute-system\n")...)
	_, err := Build(bytes.NewReader(in), Options{Version: "0.1.0"})
	if err == nil || !strings.Contains(err.Error(), "ConfigMap warmroute-extra") {
		t.Fatalf("a ConfigMap the chart does not place: error %v, want one naming it", err)
	}
}

func TestPodSchedulingInConfigIsRefused(t *testing.T) {
	in := strings.Replace(string(configDefault(t)), "      serviceAccountName: warmroute-controller-manager\n",
		"      serviceAccountName: warmroute-controller-manager\n      nodeSelector:\n        pool: system\n", 1)
	if _, err := Build(strings.NewReader(in), Options{Version: "0.1.0"}); err == nil || !strings.Contains(err.Error(), "nodeSelector") {
		t.Fatalf("config/ setting the nodeSelector the chart takes from values: error %v", err)
	}
}
