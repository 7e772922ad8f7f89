//go:build !(linux || darwin)

package extract

import "time"

// onCPU returns the wall time f takes, where thread CPU time is not at hand.
func onCPU(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}
