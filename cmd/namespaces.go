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
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// watchNamespacesEnv is where each install method puts the namespaced
// mode's list: config/namespaced and the chart's watchNamespaces value set
// it, and the OLM bundle fills it from the olm.targetNamespaces annotation
// OLM writes on the pod (empty in AllNamespaces mode).
const watchNamespacesEnv = "WATCH_NAMESPACE"

// parseWatchNamespaces reads a comma-separated list of namespaces; empty
// means every namespace. Each must be a namespace name, given once.
func parseWatchNamespaces(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", n, strings.Join(errs, "; "))
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("namespace %q listed twice", n)
		}
		out = append(out, n)
	}
	return out, nil
}
