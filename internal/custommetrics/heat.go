package custommetrics

import (
	"math"
	"time"
)

// heatHalfLife is how fast a pod's record of cache hits fades: a pod's
// heat is the prefix-cache hit tokens it served, each counted at half its
// weight after 5 minutes, so the figure speaks of the last ~10 minutes of
// traffic — long enough that a lull between two bursts does not make a warm
// cache look cold, short enough that a pod whose keys moved away cools
// within a scale-in decision's horizon.
const heatHalfLife = 5 * time.Minute

// Heat is, per vLLM pod of an endpoint, the prefix-cache hit tokens it
// served recently (decayed with heatHalfLife): what losing the pod would
// cost in cached traffic. Pods scraped once so far are absent (their
// counters hold only history).
type Heat struct {
	Time time.Time
	Pods map[string]float64
}

// podHeat accumulates Heat from successive scrapes of the hit counters.
type podHeat struct {
	at   time.Time
	pods map[string]float64
}

// add decays the heat to at and adds each pod's new hits (increases of its
// counter since the previous scrape). Pods missing from the scrape are
// dropped: they are gone or unreachable, and a pod back from a failed
// scrape counts from there.
func (h *podHeat) add(at time.Time, increases map[string]float64) Heat {
	decay := 1.0
	if !h.at.IsZero() {
		decay = math.Exp2(-at.Sub(h.at).Seconds() / heatHalfLife.Seconds())
	}
	next := make(map[string]float64, len(increases))
	for pod, inc := range increases {
		next[pod] = h.pods[pod]*decay + inc
	}
	h.at, h.pods = at, next
	out := make(map[string]float64, len(next))
	for pod, v := range next {
		out[pod] = v
	}
	return Heat{Time: at, Pods: out}
}
