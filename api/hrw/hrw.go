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

// Package hrw is rendezvous (highest random weight) hashing, shared by the
// operator's LoRA placement and the router's instance ranking. It lives
// under api/ because that is the one tree both the operator and the router
// images build from.
//
// Callers hash their own names (the operator with FNV-1a, the router with
// xxhash, so that neither's placements move); this package turns such
// hashes into scores. The instance with the highest score for a key owns
// it, so adding an instance moves only the keys it now outranks, and
// removing one moves only the keys it held.
package hrw

import "math"

// Mix64 is the splitmix64 finaliser. It turns correlated inputs (a key
// XOR an instance hash, or hashes of names that differ in one character)
// into independent-looking uniform 64-bit values, which is all rendezvous
// hashing needs and is much cheaper than hashing bytes again.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Score is the weighted rendezvous score of key on an instance whose name
// hashes to instanceHash. With equal weights the -w/ln(u) form orders
// instances as the top 53 bits of Mix64(key^instanceHash) do, and with unequal ones
// each instance wins in proportion to its weight (Schindelhauer and
// Schomaker's logarithmic method), so resizing still moves only the keys of
// the instance that came or went.
func Score(key, instanceHash uint64, weight float64) float64 {
	// The top 53 bits, centred in their interval, are a uniform u in (0, 1)
	// that never reaches 0 or 1, so the logarithm is finite and negative.
	u := (float64(Mix64(key^instanceHash)>>11) + 0.5) / (1 << 53)
	return -weight / math.Log(u)
}
