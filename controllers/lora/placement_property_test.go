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

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// case_ is one random fleet: instances, adapters with 1 to 3 replicas, and
// a capacity from 1 to 8; about half the cases have more demand than room.
type case_ struct {
	ids      []string
	adapters []Demand
	capacity int
	seed     uint64
}

func randomCase(r *rand.Rand, i int) case_ {
	n, c := 2+r.IntN(15), 1+r.IntN(8)
	ads := make([]Demand, 1+r.IntN(2*n*c))
	for j := range ads {
		ads[j] = Demand{Name: fmt.Sprintf("tenant-%d-%d", i, j), Replicas: 1 + r.IntN(3)}
	}
	return case_{ids: instances(n), adapters: ads, capacity: c, seed: r.Uint64()}
}

func (c case_) place() map[string][]string { return Place(c.adapters, c.ids, c.capacity, c.seed) }

// binds is whether the fleet has less room than the adapters ask for.
func (c case_) binds() bool {
	demand := 0
	for _, a := range c.adapters {
		demand += min(a.Replicas, len(c.ids))
	}
	return demand > len(c.ids)*c.capacity
}

// TestPlaceUnderCapacity checks, on random fleets with binding capacity,
// what placement promises whatever the movement: no instance over
// capacity, no adapter twice on an instance or over its replicas, every
// adapter on one instance before any on two, and the adapters left out
// exactly those of lowest priority.
func TestPlaceUnderCapacity(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 1))
	left := 0
	for i := range 500 {
		c := randomCase(r, i)
		got := c.place()
		load := map[string]int{}
		var unplaced, twice []string
		for _, a := range c.adapters {
			set := got[a.Name]
			if len(set) > a.Replicas || len(slices.Compact(slices.Clone(set))) != len(set) {
				t.Fatalf("case %d: %s on %v, replicas %d", i, a.Name, set, a.Replicas)
			}
			for _, id := range set {
				load[id]++
			}
			switch {
			case len(set) == 0:
				unplaced = append(unplaced, a.Name)
			case len(set) > 1:
				twice = append(twice, a.Name)
			}
		}
		for id, n := range load {
			if n > c.capacity {
				t.Fatalf("case %d: %s holds %d adapters, capacity %d", i, id, n, c.capacity)
			}
		}
		if len(unplaced) == 0 {
			continue
		}
		left += len(unplaced)
		if len(twice) > 0 {
			t.Fatalf("case %d: %v unplaced while %v have two or more instances", i, unplaced, twice)
		}
		if len(unplaced) != len(c.adapters)-len(c.ids)*c.capacity {
			t.Fatalf("case %d: %d of %d adapters unplaced with room for %d", i, len(unplaced), len(c.adapters), len(c.ids)*c.capacity)
		}
		byPriority := slices.Clone(c.adapters)
		slices.SortFunc(byPriority, func(x, y Demand) int {
			return cmp.Compare(priority(c.seed, x.Name), priority(c.seed, y.Name))
		})
		for _, a := range byPriority[:len(unplaced)] {
			if !slices.Contains(unplaced, a.Name) {
				t.Fatalf("case %d: %s placed although of lowest priority; unplaced %v", i, a.Name, unplaced)
			}
		}
	}
	t.Logf("500 random fleets: %d adapters left out, each time those of lowest priority", left)
}

// lowerBound is the fewest loads any placement with after's set sizes
// needs, starting from before: an adapter that keeps all it can from
// before still loads on as many instances as it gains.
func lowerBound(before, after map[string][]string, gone string) int {
	n := 0
	for name, set := range after {
		keep := 0
		for _, id := range before[name] {
			if id != gone {
				keep++
			}
		}
		n += max(0, len(set)-keep)
	}
	return n
}

// movesSummary accumulates, for one kind of change, the loads the change
// caused against the lower bound.
type movesSummary struct {
	cases, moves, bound, worst, between int
}

func (m *movesSummary) add(moves, bound, between int) {
	m.cases++
	m.moves += moves
	m.bound += bound
	m.worst = max(m.worst, moves-bound)
	m.between += between
}

func (m *movesSummary) String() string {
	if m.cases == 0 {
		return "no cases"
	}
	k := float64(m.cases)
	return fmt.Sprintf("%4d fleets: %5.2f loads per change (lower bound %5.2f), at worst %2d above it; %5.2f between instances that stay",
		m.cases, float64(m.moves)/k, float64(m.bound)/k, m.worst, float64(m.between)/k)
}

// TestPlaceMovesUnderCapacity makes every kind of change to random fleets
// whose capacity binds, counts the adapter loads each causes (Moves) and
// compares them with the least possible (lowerBound). It asserts the
// stated guarantee: adding or removing an adapter moves others along one
// displacement chain per round it takes part in, no chain longer than the
// instances; a resize moves nothing at all where capacity does not bind
// (TestPlaceScaleMovesOnlyWhatMust) and here is reported.
func TestPlaceMovesUnderCapacity(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	var addA, delA, addI, delI movesSummary
	for i := range 600 {
		c := randomCase(r, i)
		if !c.binds() {
			continue
		}
		n := len(c.ids)
		base := c.place()

		x := Demand{Name: fmt.Sprintf("new-%d", i), Replicas: 1 + r.IntN(3)}
		with := Place(append(slices.Clone(c.adapters), x), c.ids, c.capacity, c.seed)
		delete(with, x.Name)
		moved := Moves(base, with)
		if limit := min(x.Replicas, n) * (n - 1); moved > limit {
			t.Errorf("case %d: adding %s (replicas %d) moved %d others on %d instances, more than %d", i, x.Name, x.Replicas, moved, n, limit)
		}
		addA.add(moved, lowerBound(base, with, ""), 0)

		k := r.IntN(len(c.adapters))
		gone := c.adapters[k]
		without := Place(slices.Delete(slices.Clone(c.adapters), k, k+1), c.ids, c.capacity, c.seed)
		rest := maps.Clone(base)
		delete(rest, gone.Name)
		moved = Moves(rest, without)
		// Room freed goes to adapters short of replicas: those loads are
		// the lower bound; the chains come on top.
		bound := lowerBound(rest, without, "")
		if limit := bound + min(gone.Replicas, n)*(n-1); moved > limit {
			t.Errorf("case %d: removing %s moved %d others, more than %d", i, gone.Name, moved, limit)
		}
		delA.add(moved, bound, 0)

		grown := instances(n + 1)
		up := Place(c.adapters, grown, c.capacity, c.seed)
		between := 0
		for name, set := range up {
			for _, id := range set {
				if id != grown[n] && !slices.Contains(base[name], id) {
					between++
				}
			}
		}
		addI.add(Moves(base, up), lowerBound(base, up, ""), between)

		removed := c.ids[n/2]
		down := Place(c.adapters, slices.Delete(slices.Clone(c.ids), n/2, n/2+1), c.capacity, c.seed)
		delI.add(Moves(base, down), lowerBound(base, down, removed), 0)
	}
	t.Logf("capacity binding, adapter added:    %v", &addA)
	t.Logf("capacity binding, adapter removed:  %v", &delA)
	t.Logf("capacity binding, instance added:   %v", &addI)
	t.Logf("capacity binding, instance removed: %v", &delI)
	if addA.cases < 100 {
		t.Fatalf("only %d of 600 random fleets bind", addA.cases)
	}
}
