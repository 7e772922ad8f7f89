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

func (c case_) place(current map[string][]string) map[string][]string {
	return Place(c.adapters, c.ids, c.capacity, c.seed, current)
}

// binds is whether the fleet has less room than the adapters ask for.
func (c case_) binds() bool {
	demand := 0
	for _, a := range c.adapters {
		demand += min(a.Replicas, len(c.ids))
	}
	return demand > len(c.ids)*c.capacity
}

// TestPlaceUnderCapacity checks, on random fleets with binding capacity,
// from no placement and from an unrelated one, what placement promises
// whatever the history: no instance over capacity and loads within one of
// each other, no adapter twice on an instance or over its replicas, every
// adapter on one instance before any on two, the adapters left out exactly
// those of lowest priority, and the result its own fixed point.
func TestPlaceUnderCapacity(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 1))
	left := 0
	for i := range 1000 {
		c := randomCase(r, i)
		var current map[string][]string
		if i%2 == 1 {
			// Another fleet's placement of the same adapters.
			other := c
			other.ids = instances(1 + r.IntN(len(c.ids)+2))
			other.capacity = 1 + r.IntN(8)
			current = other.place(nil)
		}
		got := c.place(current)
		if again := c.place(got); !maps.EqualFunc(again, got, slices.Equal) {
			t.Fatalf("case %d: placing again from the placement moved adapters", i)
		}
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
		lo, hi := total(got)/len(c.ids), (total(got)+len(c.ids)-1)/len(c.ids)
		for _, id := range c.ids {
			if n := load[id]; n > c.capacity || n < lo || n > hi {
				t.Fatalf("case %d: %s holds %d adapters, capacity %d, fair share %d to %d", i, id, n, c.capacity, lo, hi)
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
	t.Logf("1000 random fleets: %d adapters left out, each time those of lowest priority", left)
}

// lowerBound is the fewest loads any valid placement with after's set
// sizes needs, starting from before: an adapter that keeps all it can from
// before still loads on as many instances as it gains (sizes), and an
// instance below its fair share ⌊T/n⌋ loads the difference (balance).
func lowerBound(before, after map[string][]string, ids []string, gone string) (sizes, balanced int) {
	held := map[string]int{}
	for name, set := range after {
		keep := 0
		for _, id := range before[name] {
			if id != gone {
				keep++
				held[id]++
			}
		}
		sizes += max(0, len(set)-keep)
	}
	fair, short := total(after)/len(ids), 0
	for _, id := range ids {
		short += max(0, fair-held[id])
	}
	return sizes, max(sizes, short)
}

// movesSummary accumulates, for one kind of change, the loads the change
// caused against the lower bounds.
type movesSummary struct {
	cases, moves, sizes, bound, worst int
}

func (m *movesSummary) add(moves, sizes, bound int) {
	m.cases++
	m.moves += moves
	m.sizes += sizes
	m.bound += bound
	m.worst = max(m.worst, moves-bound)
}

func (m *movesSummary) String() string {
	if m.cases == 0 {
		return "no cases"
	}
	k := float64(m.cases)
	return fmt.Sprintf("%4d fleets: %5.2f loads per change, lower bound %5.2f (%5.2f from set sizes alone), at worst %d above it",
		m.cases, float64(m.moves)/k, float64(m.bound)/k, float64(m.sizes)/k, m.worst)
}

// TestPlaceMovesUnderCapacity makes every kind of change to random fleets,
// most of whose capacity binds, each from the placement in force, counts the
// adapter loads each causes (Moves) and compares them with the least any
// balanced placement needs (lowerBound). It asserts the package's
// guarantee: adding an adapter of r replicas moves at most r − 1 others,
// removing one at most r beyond the bound, adding an instance loads only
// the new instance and replicas that adapters gain, removing one moves its
// adapters plus at most one other each.
func TestPlaceMovesUnderCapacity(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	// Summaries for fleets whose capacity binds [1] and those it does not [0].
	var addA, delA, addI, delI [2]movesSummary
	for i := range 1200 {
		c := randomCase(r, i)
		b := 0
		if c.binds() {
			b = 1
		}
		n := len(c.ids)
		base := c.place(nil)

		x := Demand{Name: fmt.Sprintf("new-%d", i), Replicas: 1 + r.IntN(3)}
		with := Place(append(slices.Clone(c.adapters), x), c.ids, c.capacity, c.seed, base)
		delete(with, x.Name)
		moved := Moves(base, with)
		if limit := min(x.Replicas, n) - 1; moved > limit {
			t.Errorf("case %d: adding %s (replicas %d) moved %d others, more than %d", i, x.Name, x.Replicas, moved, limit)
		}
		sizes, bound := lowerBound(base, with, c.ids, "")
		addA[b].add(moved, sizes, bound)

		k := r.IntN(len(c.adapters))
		gone := c.adapters[k]
		rest := maps.Clone(base)
		delete(rest, gone.Name)
		without := Place(slices.Delete(slices.Clone(c.adapters), k, k+1), c.ids, c.capacity, c.seed, base)
		moved = Moves(rest, without)
		sizes, bound = lowerBound(rest, without, c.ids, "")
		if limit := sizes + min(gone.Replicas, n); moved > limit {
			t.Errorf("case %d: removing %s (replicas %d) moved %d others, more than %d", i, gone.Name, gone.Replicas, moved, limit)
		}
		delA[b].add(moved, sizes, bound)

		grown := instances(n + 1)
		up := Place(c.adapters, grown, c.capacity, c.seed, base)
		for name, set := range up {
			gained := max(0, len(set)-len(base[name]))
			for _, id := range set {
				if id != grown[n] && !slices.Contains(base[name], id) {
					gained--
				}
			}
			if gained < 0 {
				t.Errorf("case %d: adding an instance moved %s between instances that stay: %v → %v", i, name, base[name], set)
			}
		}
		sizes, bound = lowerBound(base, up, grown, "")
		addI[b].add(Moves(base, up), sizes, bound)

		removed := c.ids[n/2]
		shrunk := slices.Delete(slices.Clone(c.ids), n/2, n/2+1)
		down := Place(c.adapters, shrunk, c.capacity, c.seed, base)
		moved = Moves(base, down)
		sizes, bound = lowerBound(base, down, shrunk, removed)
		if limit := 2 * bound; moved > limit {
			t.Errorf("case %d: removing an instance moved %d, more than %d", i, moved, limit)
		}
		delI[b].add(moved, sizes, bound)
	}
	for b, what := range []string{"not binding", "binding"} {
		t.Logf("capacity %s, adapter added:    %v", what, &addA[b])
		t.Logf("capacity %s, adapter removed:  %v", what, &delA[b])
		t.Logf("capacity %s, instance added:   %v", what, &addI[b])
		t.Logf("capacity %s, instance removed: %v", what, &delI[b])
	}
	if addA[1].cases < 200 {
		t.Fatalf("only %d of 1200 random fleets bind", addA[1].cases)
	}
}
