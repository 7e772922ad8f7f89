package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// cgroupRoot is where the container's cgroup is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// bufferBudget is the request buffer budget: the flag when set, else half
// the container's memory limit (the rest is the Go runtime, connections,
// the prefix index and GC headroom), else a fixed default. It reports
// where the figure came from, for the log.
func bufferBudget(flag int64, root string) (int64, string) {
	if flag > 0 {
		return flag, "--max-buffered-bytes"
	}
	if limit, ok := memoryLimit(root); ok {
		return limit / 2, "half the container memory limit"
	}
	return proxy.DefaultMaxBufferedBytes, "default (no container memory limit)"
}

// memoryLimit reads the cgroup memory limit: cgroup v2's memory.max, else
// v1's memory.limit_in_bytes (which reports "no limit" as a huge number).
func memoryLimit(root string) (int64, bool) {
	if b, err := os.ReadFile(filepath.Join(root, "memory.max")); err == nil {
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil && n > 0 // "max": no limit
	}
	if b, err := os.ReadFile(filepath.Join(root, "memory", "memory.limit_in_bytes")); err == nil {
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil && n > 0 && n < 1<<62
	}
	return 0, false
}
