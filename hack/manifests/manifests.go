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

// Package manifests is what the generators of install artifacts from
// `kustomize build` output share (hack/bundlegen for the OLM bundle,
// hack/chartgen for the Helm chart): reading the stream, encoding objects
// and replacing the generated files.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// File is one generated file, by its path relative to a root.
type File struct {
	Path    string
	Content []byte
}

// Replace writes files under root, creating directories, after removing
// the generated directories dirs (relative to root) whole, so that a file
// that is no longer generated does not linger.
func Replace(root string, files []File, dirs ...string) error {
	for _, dir := range dirs {
		if err := os.RemoveAll(filepath.Join(root, dir)); err != nil {
			return err
		}
	}
	for _, f := range files {
		path := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.Content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// DecodeAll reads a multi-document YAML stream. It decodes through JSON,
// as the API server does, so that integers stay int64.
func DecodeAll(r io.Reader) ([]*unstructured.Unstructured, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []*unstructured.Unstructured
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read manifests: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if string(j) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("decode manifest %.80s: %w", doc, err)
		}
		out = append(out, o)
	}
}

// ManagedBy is the recommended label naming the tool that manages an object.
const ManagedBy = "app.kubernetes.io/managed-by"

// DropKustomizeManagedBy removes managed-by: kustomize from an object's
// labels: in a bundle OLM manages the objects, in a chart Helm does.
func DropKustomizeManagedBy(o *unstructured.Unstructured) {
	if l := o.GetLabels(); l[ManagedBy] == "kustomize" {
		delete(l, ManagedBy)
		o.SetLabels(l)
	}
}

// Marshal writes v as YAML with sorted keys and without the null fields
// that Go types add when converted (creationTimestamp: null and the like).
func Marshal(v any) ([]byte, error) {
	return yaml.Marshal(pruneNulls(v))
}

func pruneNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, val := range t {
			if val == nil {
				continue
			}
			m[k] = pruneNulls(val)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, val := range t {
			s[i] = pruneNulls(val)
		}
		return s
	default:
		return v
	}
}
