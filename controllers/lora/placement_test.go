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
			got := Place(tc.adapters, instances(tc.instances), tc.capacity, seed, nil)
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
	want := Place(adapters, ids, 8, seed, nil)
	cur := Place(adapters[5:], ids[2:], 8, seed, nil)
	wantSticky := Place(adapters, ids, 8, seed, cur)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		a, i := slices.Clone(adapters), slices.Clone(ids)
		r.Shuffle(len(a), func(x, y int) { a[x], a[y] = a[y], a[x] })
		r.Shuffle(len(i), func(x, y int) { i[x], i[y] = i[y], i[x] })
		if got := Place(a, i, 8, seed, nil); !maps.EqualFunc(got, want, slices.Equal) {
			t.Fatal("placement depends on input order")
		}
		// The current placement is a map: its order cannot matter, nor
		// the order of each set.
		shuffled := map[string][]string{}
		for name, set := range cur {
			set = slices.Clone(set)
			r.Shuffle(len(set), func(x, y int) { set[x], set[y] = set[y], set[x] })
			shuffled[name] = set
		}
		if got := Place(a, i, 8, seed, shuffled); !maps.EqualFunc(got, wantSticky, slices.Equal) {
			t.Fatal("placement from a current one depends on input order")
		}
	}
}

// TestPlaceScaleMovesOnlyWhatMust checks that a resize moves an adapter only
// onto an added instance, or off a removed one (plus at most one other for
// each, when every instance with room already holds it), for 50 adapters
// from 4 to 16 instances and back: capacity that does not bind, so every
// move is for balance or the instance gone.
func TestPlaceScaleMovesOnlyWhatMust(t *testing.T) {
	adapters := fleet(50)
	for _, step := range [][2]int{{4, 6}, {6, 4}, {8, 16}, {16, 8}, {15, 16}, {16, 15}} {
		from, to := step[0], step[1]
		before := Place(adapters, instances(from), 0, seed, nil)
		after := Place(adapters, instances(to), 0, seed, before)
		kept := map[string]bool{}
		for _, id := range instances(min(from, to)) {
			kept[id] = true
		}
		must := 0      // assignments on removed instances
		stepAside := 0 // assignments moved off instances that stay
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
			case to < from: // little taken off an instance that stays
				for _, id := range before[a.Name] {
					if kept[id] && !slices.Contains(after[a.Name], id) {
						stepAside++
					}
				}
			}
		}
		if to > from {
			// Balance: the added instances take ⌊T/to⌋ or ⌈T/to⌉ each.
			must = 0
			for _, id := range instances(to)[from:] {
				must += count(after, id)
			}
			if lo := total(after) / to; must < lo*(to-from) {
				t.Errorf("%d→%d: new instances hold %d, fair share %d each", from, to, must, lo)
			}
		}
		if Moves(before, after) != must+stepAside || stepAside > must {
			t.Errorf("%d→%d: %d assignments move, %d had to, %d stepped aside", from, to, Moves(before, after), must, stepAside)
		}
		t.Logf("50 adapters (%d assignments), %d→%d instances: %d assignments move", total(after), from, to, Moves(before, after))
	}
}

func TestPlaceScaleOutFourToSix(t *testing.T) {
	adapters := fleet(50)
	before := Place(adapters, instances(4), 0, seed, nil)
	after := Place(adapters, instances(6), 0, seed, before)
	moves := Moves(before, after)
	// The two new instances take a third of the assignments, no more.
	if n := total(after); moves < n/6*2 || moves > (n+5)/6*2 {
		t.Fatalf("4→6 moved %d of %d assignments", moves, n)
	}
	t.Logf("4→6: %d of %d adapter-instance assignments move (ideal share 1/3 = %d)", moves, total(after), total(after)/3)
}

func TestPlaceAddingOrRemovingAnAdapterMovesFewOthers(t *testing.T) {
	adapters, ids := fleet(50), instances(16)
	before := Place(adapters, ids, 0, seed, nil)
	added := Demand{Name: "aaa-new", Replicas: 3}
	with := Place(append(slices.Clone(adapters), added), ids, 0, seed, before)
	gone := adapters[10]
	without := Place(slices.Delete(slices.Clone(adapters), 10, 11), ids, 0, seed, before)
	delete(with, added.Name)
	if n := Moves(before, with); n > added.Replicas-1 {
		t.Errorf("adding an adapter of %d replicas moved %d others", added.Replicas, n)
	}
	if n := Moves(before, without); n > gone.Replicas {
		t.Errorf("removing an adapter of %d replicas moved %d others", gone.Replicas, n)
	}
	// A placement is its own fixed point, and a capacity that does not
	// bind changes nothing.
	if again := Place(adapters, ids, 0, seed, before); !maps.EqualFunc(again, before, slices.Equal) {
		t.Error("placing again from the placement moved adapters")
	}
	if loose := Place(adapters, ids, 50, seed, nil); !maps.EqualFunc(loose, before, slices.Equal) {
		t.Error("a capacity that does not bind changed the placement")
	}
}

func TestPlaceSpreadsLoad(t *testing.T) {
	adapters, ids := fleet(50), instances(16)
	load := map[string]int{}
	for _, set := range Place(adapters, ids, 0, seed, nil) {
		for _, id := range set {
			load[id]++
		}
	}
	lo, hi := 1<<30, 0
	for _, id := range ids {
		lo, hi = min(lo, load[id]), max(hi, load[id])
	}
	// 125 assignments on 16 instances: 7 or 8 each.
	if lo != 7 || hi != 8 {
		t.Fatalf("load per instance from %d to %d", lo, hi)
	}
	t.Logf("50 adapters on 16 instances: %d to %d per instance", lo, hi)
}

// count is how many adapters the placement puts on the instance.
func count(p map[string][]string, id string) int {
	n := 0
	for _, set := range p {
		if slices.Contains(set, id) {
			n++
		}
	}
	return n
}

func total(p map[string][]string) int {
	n := 0
	for _, set := range p {
		n += len(set)
	}
	return n
}
