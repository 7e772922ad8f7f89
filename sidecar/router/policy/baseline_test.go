//go:build benchstrategies

package policy

import (
	"slices"
	"testing"
)

func init() { testedStrategies = append(testedStrategies, Baseline) }

func TestBaselineSpread(t *testing.T) { checkSpread(t, Baseline, 1.15) }

func TestBaselineIsABenchmarkStrategy(t *testing.T) {
	if slices.Contains(Strategies(false), Baseline) || !slices.Contains(Strategies(true), Baseline) {
		t.Fatalf("strategies %v, with benchmark ones %v", Strategies(false), Strategies(true))
	}
	if err := New(Tuning{}).Update(Config{Strategy: Baseline, Instances: instancesOf(2)}); err == nil {
		t.Fatal("baseline accepted without BenchmarkStrategies")
	}
}
