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

// Package lora places LoRA adapters on vLLM instances. Placement is a pure
// function of the adapters, the instances and the per-instance capacity, so
// every reconcile (and every operator replica) computes the same sets, and
// it is built on rendezvous hashing so that the sets change as little as the
// fleet does.
package lora

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"

	"github.com/warmroute/warmroute/api/hrw"
)

// Demand is one adapter and how many instances should hold it.
type Demand struct {
	Name     string
	Replicas int
}

// Place returns, for each adapter, the IDs (sorted) of the instances that
// should hold it.
//
// Each adapter ranks the instances by a hash of (seed, adapter, instance)
// and takes the first `replicas` of them that still have room (capacity
// adapters per instance; 0 means no limit), so an adapter's set depends
// only on its own name and the instance IDs unless capacity binds. Adding
// an instance moves an adapter only where the new instance outranks a
// current holder; removing one moves only the adapters it held; adding or
// removing an adapter moves no other. Adapters are served in name order,
// which decides who gets the room when capacity binds.
func Place(adapters []Demand, instances []string, capacity int, seed uint64) map[string][]string {
	ids := slices.Clone(instances)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	order := slices.Clone(adapters)
	slices.SortStableFunc(order, func(a, b Demand) int { return cmp.Compare(a.Name, b.Name) })

	load := make(map[string]int, len(ids))
	out := make(map[string][]string, len(order))
	type ranked struct {
		id    string
		score uint64
	}
	rank := make([]ranked, len(ids))
	for _, a := range order {
		if _, dup := out[a.Name]; dup {
			continue
		}
		for i, id := range ids {
			rank[i] = ranked{id: id, score: score(seed, a.Name, id)}
		}
		slices.SortFunc(rank, func(x, y ranked) int {
			if c := cmp.Compare(y.score, x.score); c != 0 {
				return c
			}
			return cmp.Compare(x.id, y.id)
		})
		set := []string{}
		for _, r := range rank {
			if len(set) >= a.Replicas {
				break
			}
			if capacity > 0 && load[r.id] >= capacity {
				continue
			}
			load[r.id]++
			set = append(set, r.id)
		}
		slices.Sort(set)
		out[a.Name] = set
	}
	return out
}

// score is the rendezvous weight of an adapter on an instance: FNV-1a of
// both names, then splitmix64 so that names differing in one character
// still rank independently. FNV stays (the router hashes with xxhash) so
// that adapters placed by earlier releases do not move.
func score(seed uint64, adapter, instance string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(adapter))
	h.Write([]byte{0})
	h.Write([]byte(instance))
	return hrw.Mix64(h.Sum64())
}
