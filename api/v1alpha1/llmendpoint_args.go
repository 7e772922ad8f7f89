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

package v1alpha1

import "strings"

// CanonicalVLLMFlag is the name of the option an argument sets, spelled as
// vLLM's parser reads it (underscores in a long option's name are dashes:
// --no_enable_prefix_caching is --no-enable-prefix-caching), without its
// "=value"; "" for an argument that is not an option (a value).
func CanonicalVLLMFlag(arg string) string {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
		return ""
	}
	name, _, _ := strings.Cut(arg, "=")
	if strings.HasPrefix(name, "--") {
		return "--" + strings.ReplaceAll(strings.TrimPrefix(name, "--"), "_", "-")
	}
	return name
}
