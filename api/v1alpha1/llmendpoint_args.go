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

import (
	"fmt"
	"strings"
)

// ownedFlag is a `vllm serve` option the operator sets from the spec;
// spec.model.args may not set it.
type ownedFlag struct {
	// Flag is the option's canonical spelling.
	Flag string
	// Instead is what to use instead, for the refusal's message.
	Instead string
}

// ownedVLLMFlags by canonical name. vLLM's parser takes the last of
// repeated flags, so the operator puts its own after the user's; refusing
// them here keeps a user's value from being silently overridden.
var ownedVLLMFlags = map[string]ownedFlag{}

func init() {
	for _, f := range []ownedFlag{
		{"--host", "nothing: the operator serves on 0.0.0.0, which the probes and the routers need"},
		{"--port", "nothing: the operator serves on port 8000, which the probes and the routers need"},
		{"--model", "spec.model.uri"},
		{"--served-model-name", "spec.model.name"},
		{"--tensor-parallel-size", "spec.model.tensorParallelSize"},
		{"-tp", "spec.model.tensorParallelSize"},
		{"--max-model-len", "spec.model.maxModelLen"},
		{"--enable-prefix-caching", "nothing: warmroute always enables prefix caching"},
		{"--no-enable-prefix-caching", "nothing: warmroute always enables prefix caching; prefix-aware routing is pointless without it"},
		{"--enable-lora", "spec.model.maxLoras (which enables LoRA) or spec.loraAdapters"},
		{"--no-enable-lora", "spec.model.maxLoras (which enables LoRA) or spec.loraAdapters"},
		{"--max-loras", "spec.model.maxLoras"},
		{"--max-lora-rank", "spec.model.maxLoraRank"},
		{"--shutdown-timeout", "spec.model.terminationGracePeriodSeconds (the operator derives the drain from it)"},
		{"--config", "flags in spec.model.args: a config file could set any option, the operator's included"},
	} {
		ownedVLLMFlags[f.Flag] = f
	}
}

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

// OwnedFlagError is a refusal of a user argument that sets an option the
// operator owns, or "" when the argument is the user's to set.
func OwnedFlagError(arg string) string {
	f, ok := ownedVLLMFlags[CanonicalVLLMFlag(arg)]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s is set by the operator; use %s", f.Flag, f.Instead)
}
