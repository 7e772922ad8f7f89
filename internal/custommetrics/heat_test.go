package custommetrics

import (
	"math"
	"testing"
	"time"
)

// TestHeat follows two pods through scrapes: the first scrape is a
// baseline, hits add, heat halves every heatHalfLife, a restarted pod's
// counter counts from zero, and a pod missing from a scrape is dropped.
func TestHeat(t *testing.T) {
	t0 := time.Unix(0, 0)
	var w hitWindow
	steps := []struct {
		name string
		at   time.Duration
		pods map[string][2]float64
		want map[string]float64
	}{
		{"baseline", 0, map[string][2]float64{"a": {1000, 2000}, "b": {50, 100}}, map[string]float64{}},
		{"hits add", 10 * time.Second, map[string][2]float64{"a": {1600, 2800}, "b": {50, 200}}, map[string]float64{"a": 600, "b": 0}},
		{"a half-life later", 10*time.Second + heatHalfLife, map[string][2]float64{"a": {1600, 2800}, "b": {150, 300}}, map[string]float64{"a": 300, "b": 100}},
		{"b restarted", 10*time.Second + 2*heatHalfLife, map[string][2]float64{"a": {1600, 2800}, "b": {40, 60}}, map[string]float64{"a": 150, "b": 90}},
		{"a gone", 20*time.Second + 2*heatHalfLife, map[string][2]float64{"b": {40, 60}}, map[string]float64{"b": 90 * math.Exp2(-10.0/heatHalfLife.Seconds())}},
	}
	for _, st := range steps {
		_, _, h := w.add(t0.Add(st.at), hitSample{pods: st.pods}, time.Minute)
		if len(h.Pods) != len(st.want) {
			t.Errorf("%s: heat %v, want %v", st.name, h.Pods, st.want)
			continue
		}
		for pod, want := range st.want {
			if got, ok := h.Pods[pod]; !ok || math.Abs(got-want) > 1e-6 {
				t.Errorf("%s: pod %s heat %v, want %v", st.name, pod, got, want)
			}
		}
	}
}
