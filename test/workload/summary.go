package workload

import (
	"math"
	"slices"
	"time"
)

// Percentiles of a distribution, in simulated seconds.
type Percentiles struct {
	P50, P90, P99 float64
}

// percentiles returns nearest-rank percentiles of xs (sorted in place).
func percentiles(xs []float64) Percentiles {
	if len(xs) == 0 {
		return Percentiles{}
	}
	slices.Sort(xs)
	at := func(q float64) float64 {
		return xs[max(0, int(math.Ceil(q*float64(len(xs))))-1)]
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// Summary condenses the results of a run.
type Summary struct {
	Requests, Failures int
	// Wall is the wall time from the first send to the last finish;
	// Throughput is successful requests per simulated second over it.
	Wall       time.Duration
	Throughput float64
	// TTFT is client-side (first content chunk), Latency the whole
	// response, both converted to simulated seconds; EngineTTFT is what
	// the simulators report, which excludes the network and the router.
	TTFT, EngineTTFT, Latency Percentiles
	// Share counts successful requests per instance (every instance
	// given to Summarize appears, with 0 if it served none);
	// ShareMaxAvg is the busiest instance's count over the average.
	Share       map[string]int
	ShareMaxAvg float64
	// HeaderHitRate is cached ÷ prompt tokens as the responses' headers
	// report them: a per-request view of the prefix cache that agrees
	// with the simulators' counters when every request succeeded.
	HeaderHitRate float64
}

// Summarize condenses results. instances lists every instance id that
// could have served (so that one serving nothing counts in the balance);
// timeScale is the run's Options.TimeScale.
func Summarize(results []Result, instances []string, timeScale float64) Summary {
	if timeScale <= 0 {
		timeScale = 1
	}
	s := Summary{Requests: len(results), Share: make(map[string]int, len(instances))}
	for _, id := range instances {
		s.Share[id] = 0
	}
	var ttft, engine, latency []float64
	var first, last time.Duration = -1, 0
	var prompt, cached int
	for _, r := range results {
		if r.OK() || r.Latency > 0 { // sent, whatever the outcome
			if first < 0 || r.Sent < first {
				first = r.Sent
			}
			last = max(last, r.Sent+r.Latency)
		}
		if !r.OK() {
			s.Failures++
			continue
		}
		ttft = append(ttft, r.TTFT.Seconds()/timeScale)
		latency = append(latency, r.Latency.Seconds()/timeScale)
		if r.EngineTTFT >= 0 {
			engine = append(engine, r.EngineTTFT)
		}
		s.Share[r.Instance]++
		prompt += r.PromptTokens
		cached += r.CachedTokens
	}
	s.TTFT, s.EngineTTFT, s.Latency = percentiles(ttft), percentiles(engine), percentiles(latency)
	if first >= 0 {
		s.Wall = last - first
	}
	if ok := s.Requests - s.Failures; ok > 0 && s.Wall > 0 {
		s.Throughput = float64(ok) / (s.Wall.Seconds() / timeScale)
	}
	s.ShareMaxAvg = MaxOverAverage(s.Share)
	if prompt > 0 {
		s.HeaderHitRate = float64(cached) / float64(prompt)
	}
	return s
}

// MaxOverAverage is the largest count over the mean count (0 if empty).
func MaxOverAverage(counts map[string]int) float64 {
	total, most := 0, 0
	for _, n := range counts {
		total += n
		most = max(most, n)
	}
	if total == 0 {
		return 0
	}
	return float64(most) / (float64(total) / float64(len(counts)))
}
