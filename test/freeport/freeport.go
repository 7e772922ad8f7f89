// Package freeport picks loopback addresses for processes a test starts,
// stops and starts again on the same address (router replicas, whose peers
// find them there).
//
// A port the kernel handed out for "127.0.0.1:0" lies in its ephemeral
// range, from which it also picks the local port of every outgoing
// connection. While a process is down between a stop and a start, a
// connection of anything else on the machine can be given its port, and
// the restarted process then fails with "address already in use", as the
// benchmark's restarted replica did in a fresh-clone run of .ci/run. Ports
// below the ephemeral range are never given to outgoing connections, so
// only another listener choosing the same one of some twenty thousand
// ports can take it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked: above the well-known and commonly
// configured ones.
const lowest = 10000

// rangeFile holds the kernel's ephemeral port range on Linux.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Loopback returns n distinct addresses on 127.0.0.1 that are free now,
// with ports below the kernel's ephemeral range when it is known (Linux),
// else ports the kernel picks.
func Loopback(n int) ([]string, error) {
	candidate := func() string { return "127.0.0.1:0" }
	if high, ok := ephemeralStart(); ok && high > lowest+n {
		candidate = func() string {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(lowest+rand.IntN(high-lowest)))
		}
	}
	// Each address is held until all are picked, so that they differ.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	var lastErr error
	for tries := 0; len(held) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no free loopback port after %d tries: %w", tries, lastErr)
		}
		l, err := net.Listen("tcp", candidate())
		if err != nil {
			lastErr = err // taken
			continue
		}
		held = append(held, l)
	}
	out := make([]string, len(held))
	for i, l := range held {
		out[i] = l.Addr().String()
	}
	return out, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() (int, bool) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(f[0])
	return low, err == nil
}
