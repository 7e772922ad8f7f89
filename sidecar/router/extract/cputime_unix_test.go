//go:build linux || darwin

package extract

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// onCPU runs f on one OS thread and returns the CPU time that thread spent
// in it: unlike wall time, it leaves out the time slices of the other
// processes of a busy machine.
func onCPU(f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a)
	f()
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b)
	return time.Duration(b.Nano() - a.Nano())
}
