package bench

import (
	"strings"
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// TestSpillsNameEveryReason: the spill column names every reason the
// router gives, token load included (it was left out, so a Mooncake row
// read "4.2 % (concurrency threshold 55)" for 168 spills).
func TestSpillsNameEveryReason(t *testing.T) {
	x := RunResult{SpillRate: 0.042, SpillReasons: map[string]int64{
		policy.SpillConcurrency: 55, policy.SpillTokens: 113, policy.SpillAllBusy: 2, policy.SpillUnhealthy: 1}}
	got := spills(x)
	for _, want := range []string{"concurrency threshold 55", "token load 113", "all busy 2", "unhealthy 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("spills = %q, want %q in it", got, want)
		}
	}
}
