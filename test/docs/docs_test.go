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

// Package docs_test checks figures the READMEs state against the
// measurements in docs/benchmarks.md they summarize, so that a new
// measurement cannot leave a claim behind.
package docs_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var repoRoot = filepath.Join("..", "..")

func read(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// cells splits a Markdown table row.
func cells(row string) []string {
	var out []string
	for _, c := range strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

func percent(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// The keys moved between surviving instances on scale that
// docs/operations.md states: the running router's rows (warm) of the
// remap table.
func TestKeysMovedBetweenSurvivors(t *testing.T) {
	const claim = "5–7 % of long-context's keys and under 2 % of the others'"
	const page = "docs/operations.md"
	if !strings.Contains(strings.Join(strings.Fields(read(t, page)), " "), claim) {
		t.Fatalf("%s no longer says %q; update this test with the claim", page, claim)
	}
	var long, others []float64
	for _, row := range strings.Split(read(t, "docs/benchmarks.md"), "\n") {
		c := cells(row)
		if len(c) != 6 || !strings.HasSuffix(c[0], "requests, warm") {
			continue
		}
		v := percent(t, c[5])
		if strings.HasPrefix(c[0], "long-context") {
			long = append(long, v)
		} else {
			others = append(others, v)
		}
	}
	if len(long) == 0 || len(others) == 0 {
		t.Fatal("no warm rows in docs/benchmarks.md's remap table")
	}
	for _, v := range long {
		if math.Floor(v) < 5 || math.Floor(v) > 7 {
			t.Errorf("long-context moved %.2f %% between survivors; %s says 5–7 %%", v, page)
		}
	}
	for _, v := range others {
		if v >= 2 {
			t.Errorf("a workload moved %.2f %% between survivors; %s says under 2 %%", v, page)
		}
	}
}

// One decision-latency figure: both READMEs state the median of the
// latest BenchmarkDecision table in docs/benchmarks.md.
func TestDecisionLatencyFigure(t *testing.T) {
	var p50 float64
	for _, row := range strings.Split(read(t, "docs/benchmarks.md"), "\n") {
		if c := cells(row); len(c) == 7 && c[0] == "now" && strings.HasSuffix(c[2], "µs") {
			p50 = percent(t, strings.TrimSuffix(c[2], "µs"))
			break
		}
	}
	if p50 == 0 {
		t.Fatal("no decision table in docs/benchmarks.md")
	}
	figure := "about " + strconv.Itoa(int(math.Round(p50))) + " µs at the median"
	for _, path := range []string{"README.md", "sidecar/README.md"} {
		if !strings.Contains(strings.Join(strings.Fields(read(t, path)), " "), figure) {
			t.Errorf("%s does not say the decision takes %q (BenchmarkDecision p50 %.1f µs)", path, figure, p50)
		}
	}
}
