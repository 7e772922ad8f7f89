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
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

const seed = 0x5eed

func instances(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("llm-vllm-%02d", i)
	}
	return ids
}

// fleet is n adapters with 1 to 4 replicas each, fixed by the index.
func fleet(n int) []Demand {
	out := make([]Demand, n)
	for i := range out {
		out[i] = Demand{Name: fmt.Sprintf("tenant-%02d", i), Replicas: 1 + i%4}
	}
	return out
}

func TestPlaceReplicasAndCapacity(t *testing.T) {
	tests := []struct {
		name      string
		adapters  []Demand
		instances int
		capacity  int
		want      map[string]int // set size per adapter
	}{
		{name: "replicas honoured", adapters: []Demand{{"a", 2}, {"b", 1}, {"c", 3}}, instances: 4,
			want: map[string]int{"a": 2, "b": 1, "c": 3}},
		{name: "capped at the fleet", adapters: []Demand{{"a", 5}}, instances: 3, want: map[string]int{"a": 3}},
		{name: "no instances", adapters: []Demand{{"a", 2}}, instances: 0, want: map[string]int{"a": 0}},
		{name: "capacity binds: each adapter once before any twice", adapters: []Demand{{"a", 2}, {"b", 2}, {"c", 2}}, instances: 2, capacity: 2,
			want: map[string]int{"a": 2, "b": 1, "c": 1}}, // b and c rank below a (priorities fixed by the seed)
		{name: "more adapters than room: the lowest priority is left out", adapters: []Demand{{"a", 1}, {"b", 3}, {"c", 1}}, instances: 2, capacity: 1,
			want: map[string]int{"a": 1, "b": 0, "c": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Place(tc.adapters, instances(tc.instances), tc.capacity, seed)
			load := map[string]int{}
			for name, want := range tc.want {
				if len(got[name]) != want {
					t.Errorf("%s on %d instances %v, want %d", name, len(got[name]), got[name], want)
				}
				for _, id := range got[name] {
					load[id]++
				}
			}
			for id, n := range load {
				if tc.capacity > 0 && n > tc.capacity {
					t.Errorf("%s holds %d adapters, capacity %d", id, n, tc.capacity)
				}
			}
		})
	}
}

func TestPlaceDeterministic(t *testing.T) {
	adapters, ids := fleet(50), instances(16)
	want := Place(adapters, ids, 8, seed)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		a, i := slices.Clone(adapters), slices.Clone(ids)
		r.Shuffle(len(a), func(x, y int) { a[x], a[y] = a[y], a[x] })
		r.Shuffle(len(i), func(x, y int) { i[x], i[y] = i[y], i[x] })
		if got := Place(a, i, 8, seed); !maps.EqualFunc(got, want, slices.Equal) {
			t.Fatal("placement depends on input order")
		}
	}
}

// TestPlaceScaleMovesOnlyWhatMust checks that a resize moves an adapter only
// onto an added instance or off a removed one, never between two instances
// that stay, for 50 adapters from 4 to 16 instances and back.
func TestPlaceScaleMovesOnlyWhatMust(t *testing.T) {
	adapters := fleet(50)
	for _, step := range [][2]int{{4, 6}, {6, 4}, {8, 16}, {16, 8}, {15, 16}, {16, 15}} {
		from, to := step[0], step[1]
		before := Place(adapters, instances(from), 0, seed)
		after := Place(adapters, instances(to), 0, seed)
		kept := map[string]bool{}
		for _, id := range instances(min(from, to)) {
			kept[id] = true
		}
		must := 0 // assignments on removed instances
		for _, a := range adapters {
			for _, id := range before[a.Name] {
				if !kept[id] && to < from && a.Replicas <= to {
					must++
				}
			}
			switch {
			case to > from: // nothing new on an instance that was there
				for _, id := range after[a.Name] {
					if kept[id] && !slices.Contains(before[a.Name], id) {
						t.Errorf("%d→%d: %s moved onto %s, which was there before", from, to, a.Name, id)
					}
				}
			case to < from: // nothing taken off an instance that stays
				for _, id := range before[a.Name] {
					if kept[id] && !slices.Contains(after[a.Name], id) {
						t.Errorf("%d→%d: %s moved off %s, which stays", from, to, a.Name, id)
					}
				}
			}
		}
		if to < from && Moves(before, after) != must {
			t.Errorf("%d→%d: %d assignments move, %d had to", from, to, Moves(before, after), must)
		}
		t.Logf("50 adapters (%d assignments), %d→%d instances: %d assignments move", total(after), from, to, Moves(before, after))
	}
}

func TestPlaceScaleOutFourToSix(t *testing.T) {
	adapters := fleet(50)
	before := Place(adapters, instances(4), 0, seed)
	after := Place(adapters, instances(6), 0, seed)
	moves := Moves(before, after)
	// The two new instances should take about a third of the assignments:
	// no more (no needless moves) and some (they are used at all).
	if n := total(after); moves == 0 || moves > n/2 {
		t.Fatalf("4→6 moved %d of %d assignments", moves, n)
	}
	t.Logf("4→6: %d of %d adapter-instance assignments move (ideal share 1/3 = %d)", moves, total(after), total(after)/3)
}

func TestPlaceAddingOrRemovingAnAdapterMovesNoOther(t *testing.T) {
	adapters, ids := fleet(50), instances(16)
	before := Place(adapters, ids, 0, seed)
	with := Place(append(slices.Clone(adapters), Demand{Name: "aaa-new", Replicas: 3}), ids, 0, seed)
	without := Place(slices.Delete(slices.Clone(adapters), 10, 11), ids, 0, seed)
	for _, a := range adapters {
		if !slices.Equal(before[a.Name], with[a.Name]) {
			t.Errorf("adding an adapter moved %s: %v → %v", a.Name, before[a.Name], with[a.Name])
		}
		if a.Name != adapters[10].Name && !slices.Equal(before[a.Name], without[a.Name]) {
			t.Errorf("removing an adapter moved %s: %v → %v", a.Name, before[a.Name], without[a.Name])
		}
	}
	// Capacity that does not bind changes nothing either.
	if loose := Place(adapters, ids, 50, seed); !maps.EqualFunc(loose, before, slices.Equal) {
		t.Error("a capacity that does not bind changed the placement")
	}
}

func TestPlaceSpreadsLoad(t *testing.T) {
	adapters, ids := fleet(50), instances(16)
	load := map[string]int{}
	for _, set := range Place(adapters, ids, 0, seed) {
		for _, id := range set {
			load[id]++
		}
	}
	lo, hi := 1<<30, 0
	for _, id := range ids {
		lo, hi = min(lo, load[id]), max(hi, load[id])
	}
	// 125 assignments on 16 instances: ~7.8 each.
	if lo == 0 || hi > 16 {
		t.Fatalf("load per instance from %d to %d", lo, hi)
	}
	t.Logf("50 adapters on 16 instances: %d to %d per instance", lo, hi)
}

func total(p map[string][]string) int {
	n := 0
	for _, set := range p {
		n += len(set)
	}
	return n
}
