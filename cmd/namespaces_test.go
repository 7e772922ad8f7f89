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

package main

import (
	"slices"
	"testing"
)

func TestParseWatchNamespaces(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "", want: nil},                                        // every namespace
		{in: "  ", want: nil},                                      // OLM's AllNamespaces annotation is empty
		{in: "team-a", want: []string{"team-a"}},                   // OwnNamespace or SingleNamespace
		{in: "team-a, team-b", want: []string{"team-a", "team-b"}}, // MultiNamespace, spaces tolerated
		{in: "team-a,,team-b", wantErr: true},                      // an empty element is a typo, not "all"
		{in: "Team-A", wantErr: true},                              // not a namespace name
		{in: "team-a,team-a", wantErr: true},                       // given twice
	}
	for _, tt := range tests {
		got, err := parseWatchNamespaces(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseWatchNamespaces(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("parseWatchNamespaces(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
