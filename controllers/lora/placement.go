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
// function of the adapters, the instances, the per-instance capacity and
// the current placement (the one the routing document records), so every
// reconcile and every operator replica, restarted or not, computes the same
// sets; with no current placement it is bounded-load rendezvous hashing.
//
// The guarantee. Let T be the assignments placed (each adapter's replicas,
// capped by the fleet) and n the instances.
//   - Coverage before redundancy: every adapter holds one instance before
//     any holds two; when the fleet cannot hold every adapter once
//     (adapters > n × capacity), those left out are the lowest in a fixed
//     hash priority, whatever the history.
//   - Balance: every instance holds ⌊T/n⌋ or ⌈T/n⌉ adapters, never more
//     than capacity.
//   - Stickiness: an adapter stays where it is unless its instance is gone,
//     its replica target shrank, or the slot is needed: for balance (the
//     move leaves an instance above ⌈T/n⌉ or fills one below ⌊T/n⌋), or
//     for a replica whose only instances with room hold it already (the
//     other adapter steps aside to one of those).
//   - Adding an adapter of r replicas moves at most r − 1 others (none for
//     one replica): each replica goes to an instance with room that does
//     not hold the adapter yet, and only when every such instance is full
//     does one other adapter step aside to an instance with room.
//   - Removing an adapter of r replicas moves at most r others beyond the
//     replicas the freed room lets other adapters gain.
//   - Adding an instance moves adapters only onto it (a new instance's
//     share, ⌊T/(n+1)⌋ or ⌈T/(n+1)⌉, plus replicas the new room lets
//     adapters gain); removing one moves its adapters and, rarely, one
//     other per adapter whose every instance with room already holds it.
//
// Measured moves against the least possible are in
// placement_property_test.go.
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

// adapter is one Demand during placement.
type adapter struct {
	name     string
	replicas int
	target   int
	priority uint64
	score    []uint64 // rendezvous weight per instance index
	holds    []bool   // per instance index
	set      []int    // instance indexes held
}

func (a *adapter) add(i int) { a.holds[i], a.set = true, append(a.set, i) }

func (a *adapter) remove(i int) {
	a.holds[i] = false
	a.set = slices.DeleteFunc(a.set, func(j int) bool { return j == i })
}

// Place returns, for each adapter, the IDs (sorted) of the instances that
// should hold it; an adapter the fleet has no room for gets an empty set.
// current is the placement in force (nil when there is none): whatever of
// it is still valid stays.
//
// It works in four steps. Targets: in rounds, every adapter that wants more
// than k replicas gets its (k+1)-th, adapters taking their turn in
// priority order (a hash of seed and name), while the fleet has room (n ×
// capacity, 0: no limit). Keep: each adapter keeps its current instances
// that still exist, the best-ranked up to its target. Shed: an instance
// above ⌈T/n⌉ gives an adapter to the least-loaded instance. Fill: missing
// replicas go, in rounds and priority order, to the instance not holding
// the adapter that is below ⌊T/n⌋, else best-ranked by rendezvous hash of
// (seed, adapter, instance) among those below ⌈T/n⌉; raise: an instance
// still below ⌊T/n⌋ takes an adapter from the most-loaded one. Whenever
// one instance holds more adapters than another, it holds one the other
// lacks, so each shed or raise is a single move.
func Place(adapters []Demand, instances []string, capacity int, seed uint64, current map[string][]string) map[string][]string {
	ids := slices.Clone(instances)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	n := len(ids)
	index := make(map[string]int, n)
	for i, id := range ids {
		index[id] = i
	}

	seen := make(map[string]bool, len(adapters))
	order := make([]*adapter, 0, len(adapters))
	for _, d := range adapters {
		if seen[d.Name] {
			continue
		}
		seen[d.Name] = true
		order = append(order, &adapter{name: d.Name, replicas: min(max(d.Replicas, 0), n), priority: priority(seed, d.Name)})
	}
	slices.SortFunc(order, func(x, y *adapter) int {
		if c := cmp.Compare(y.priority, x.priority); c != 0 {
			return c
		}
		return cmp.Compare(x.name, y.name)
	})

	// Targets: coverage before redundancy, the lowest priority left out.
	room, total := n*capacity, 0
	for round := range n {
		for _, a := range order {
			if a.replicas > round && (capacity == 0 || room > 0) {
				a.target++
				room--
				total++
			}
		}
	}
	out := make(map[string][]string, len(order))
	if n == 0 || total == 0 {
		for _, a := range order {
			out[a.name] = []string{}
		}
		return out
	}
	lo, hi := total/n, (total+n-1)/n

	load := make([]int, n)
	for _, a := range order {
		a.score, a.holds = make([]uint64, n), make([]bool, n)
		for i, id := range ids {
			a.score[i] = score(seed, a.name, id)
		}
		// Keep: the current instances that exist, best-ranked first.
		var kept []int
		for _, id := range current[a.name] {
			if i, ok := index[id]; ok && !slices.Contains(kept, i) {
				kept = append(kept, i)
			}
		}
		slices.SortFunc(kept, func(x, y int) int { return cmp.Compare(a.score[y], a.score[x]) })
		for _, i := range kept[:min(len(kept), a.target)] {
			a.add(i)
			load[i]++
		}
	}

	// move takes one adapter from instance from to instance to (which
	// holds fewer): the one that ranks to highest, so that the choice is
	// the rendezvous order's.
	move := func(from, to int) {
		var best *adapter
		for _, a := range order {
			if a.holds[from] && !a.holds[to] && (best == nil || a.score[to] > best.score[to]) {
				best = a
			}
		}
		best.remove(from)
		best.add(to)
		load[from]--
		load[to]++
	}
	// Shed: an instance above ⌈T/n⌉ gives to the least-loaded.
	for {
		to, from := extremes(load)
		if load[from] <= hi {
			break
		}
		move(from, to)
	}

	// Fill, in rounds so that every adapter's next replica comes before
	// any adapter's one after.
	for placed := true; placed; {
		placed = false
		for _, a := range order {
			if len(a.set) >= a.target {
				continue
			}
			placed = true
			best := -1
			for i := range n {
				if a.holds[i] || load[i] >= hi {
					continue
				}
				short, bestShort := load[i] < lo, best >= 0 && load[best] < lo
				if best < 0 || short && !bestShort || short == bestShort && a.score[i] > a.score[best] {
					best = i
				}
			}
			if best < 0 {
				// Every instance with room holds a already: the best-ranked
				// other instance, which is full, hands one adapter to the
				// least-loaded one (which holds fewer, so one it lacks).
				for i := range n {
					if !a.holds[i] && (best < 0 || a.score[i] > a.score[best]) {
						best = i
					}
				}
				to, _ := extremes(load)
				move(best, to)
			}
			a.add(best)
			load[best]++
		}
	}

	// Raise: an instance below ⌊T/n⌋ takes from the most loaded.
	for {
		to, from := extremes(load)
		if load[to] >= lo {
			break
		}
		move(from, to)
	}

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

// extremes are the indexes of the least and the most loaded instances, the
// first of each in ID order.
func extremes(load []int) (least, most int) {
	for i, l := range load {
		if l < load[least] {
			least = i
		}
		if l > load[most] {
			most = i
		}
	}
	return least, most
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
