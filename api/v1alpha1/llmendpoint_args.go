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
	"slices"
	"strings"
)

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

// prefixCachingHashAlgoFlag is vLLM's choice of the hash that names prefix
// cache blocks. Tenants sharing an instance are kept apart only by the
// salts mixed into those hashes, so two prompts whose blocks collide could
// read each other's cache: the hash must be collision-resistant.
const prefixCachingHashAlgoFlag = "--prefix-caching-hash-algo"

// CollisionResistantHashAlgos are the --prefix-caching-hash-algo choices
// built on SHA-256 (vLLM's others, xxhash and xxhash_cbor, are 128-bit
// non-cryptographic hashes). The first is vLLM's default and the one every
// supported release has.
var CollisionResistantHashAlgos = []string{"sha256", "sha256_cbor"}

// HashAlgoArg is one argument of spec.model.args that sets
// --prefix-caching-hash-algo.
// +kubebuilder:object:generate=false
type HashAlgoArg struct {
	// Index is the argument's position in spec.model.args.
	Index int
	// Value is the algorithm it names ("" when none follows).
	Value string
}

// PrefixCachingHashAlgoArgs are the arguments that set vLLM's
// --prefix-caching-hash-algo, in any spelling vLLM's parser reads as it:
// underscores for dashes, "=value" or the next argument, and the prefixes
// Python's argparse accepts as abbreviations (from --prefix-caching on;
// shorter ones are ambiguous with vLLM's other --prefix-cache* options).
func PrefixCachingHashAlgoArgs(args []string) []HashAlgoArg {
	var found []HashAlgoArg
	for i, a := range args {
		name := CanonicalVLLMFlag(a)
		if len(name) < len("--prefix-caching") || !strings.HasPrefix(prefixCachingHashAlgoFlag, name) {
			continue
		}
		_, value, ok := strings.Cut(a, "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
		}
		found = append(found, HashAlgoArg{Index: i, Value: value})
	}
	return found
}

// PrefixCachingHashAlgo is the algorithm the operator passes to vLLM: the
// user's (the last they set) when it is collision-resistant, else
// CollisionResistantHashAlgos[0].
func PrefixCachingHashAlgo(args []string) string {
	set := PrefixCachingHashAlgoArgs(args)
	if n := len(set); n > 0 && slices.Contains(CollisionResistantHashAlgos, set[n-1].Value) {
		return set[n-1].Value
	}
	return CollisionResistantHashAlgos[0]
}
