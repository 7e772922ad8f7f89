package bench

import (
	"strings"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// TestSpillsNameEveryReason: the spill column names every reason the
// router gives.
func TestSpillsNameEveryReason(t *testing.T) {
	x := RunResult{SpillRate: 0.042, SpillReasons: map[string]int64{
		policy.SpillConcurrency: 55, policy.SpillAllBusy: 2, policy.SpillUnhealthy: 1}}
	got := spills(x)
	for _, want := range []string{"concurrency threshold 55", "all busy 2", "unhealthy 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("spills = %q, want %q in it", got, want)
		}
	}
}
