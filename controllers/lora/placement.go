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
// every reconcile (and every operator replica) computes the same sets. It is
// rendezvous hashing with bounded loads, served in rounds so that coverage
// comes before redundancy.
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
// should hold it; an adapter the fleet has no room for gets an empty set.
//
// Each adapter ranks the instances by a rendezvous hash of (seed, adapter,
// instance) and has a priority, a hash of (seed, adapter). Placement runs in
// rounds: round k gives every adapter that wants more than k replicas its
// (k+1)-th instance, adapters taking their turn in priority order, each
// taking the best-ranked instance that does not hold it yet and holds fewer
// than capacity adapters (0: no limit). So every adapter has one instance
// before any has two, and when the fleet cannot hold every adapter once
// (more adapters than instances × capacity) the ones left out are those of
// lowest priority: a hash, not an accident of naming.
//
// The guarantee. While capacity does not bind, an adapter's set is the top
// `replicas` of its own ranking, so it depends only on its name and the
// instance IDs: adding or removing an adapter moves no other, adding an
// instance moves an adapter only onto it, removing one moves only the
// adapters it held. When capacity binds, an added adapter (or one removed)
// displaces others along one chain per round it takes part in: it takes a
// slot, the lower-priority adapter that had that slot takes its next
// choice, and so on, until a slot that stays free or the last demand,
// which is left out. Each link lands on an instance that the old placement
// filled later than the one before, so a chain visits an instance at most
// once: with one replica per adapter, adding or removing one moves at most
// instances − 1 others. With more replicas a displaced adapter holds a
// different instance in later rounds, which can start a further chain; the
// property tests check r × (instances − 1) for an adapter of r replicas
// on random fleets. A resize under binding capacity has no such bound:
// freed or new room is taken in priority order, which reshuffles the
// adapters that had overflowed to their later choices. Measured moves
// against the least possible are in placement_property_test.go.
func Place(adapters []Demand, instances []string, capacity int, seed uint64) map[string][]string {
	ids := slices.Clone(instances)
	slices.Sort(ids)
	ids = slices.Compact(ids)

	type adapter struct {
		name     string
		replicas int
		priority uint64
		rank     []int // indexes into ids, best first
		next     int   // position in rank to look from
		set      []int
	}
	seen := make(map[string]bool, len(adapters))
	order := make([]*adapter, 0, len(adapters))
	rounds := 0
	for _, d := range adapters {
		if seen[d.Name] {
			continue
		}
		seen[d.Name] = true
		a := &adapter{name: d.Name, replicas: min(d.Replicas, len(ids)), priority: priority(seed, d.Name)}
		order = append(order, a)
		rounds = max(rounds, a.replicas)
	}
	slices.SortFunc(order, func(x, y *adapter) int {
		if c := cmp.Compare(y.priority, x.priority); c != 0 {
			return c
		}
		return cmp.Compare(x.name, y.name)
	})

	scores := make([]uint64, len(ids))
	load := make([]int, len(ids))
	for round := range rounds {
		for _, a := range order {
			if a.replicas <= round {
				continue
			}
			if a.rank == nil {
				a.rank = make([]int, len(ids))
				for i, id := range ids {
					a.rank[i], scores[i] = i, score(seed, a.name, id)
				}
				slices.SortFunc(a.rank, func(x, y int) int {
					if c := cmp.Compare(scores[y], scores[x]); c != 0 {
						return c
					}
					return cmp.Compare(x, y)
				})
			}
			// The instances before a.next are taken by a or were full at its
			// last turn, and loads only grow: none can take it now.
			for ; a.next < len(a.rank); a.next++ {
				i := a.rank[a.next]
				if capacity > 0 && load[i] >= capacity {
					continue
				}
				load[i]++
				a.set = append(a.set, i)
				a.next++
				break
			}
		}
	}

	out := make(map[string][]string, len(order))
	for _, a := range order {
		set := make([]string, 0, len(a.set))
		for _, i := range a.set {
			set = append(set, ids[i])
		}
		slices.Sort(set)
		out[a.name] = set
	}
	return out
}

// priority orders adapters when capacity binds: the rendezvous weight of
// the adapter on an instance named "", which no pod is.
func priority(seed uint64, adapter string) uint64 { return score(seed, adapter, "") }

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
