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

package lora

import "slices"

// Only tests count moves: placement itself never needs to.

// Moves counts the adapter-instance assignments in after that were not in
// before: each is one adapter load on an instance that did not hold it.
func Moves(before, after map[string][]string) int {
	n := 0
	for name, set := range after {
		for _, id := range set {
			if !slices.Contains(before[name], id) {
				n++
			}
		}
	}
	return n
}

// Priority exposes the order in which adapters are served.
func Priority(seed uint64, adapter string) uint64 { return priority(seed, adapter) }
