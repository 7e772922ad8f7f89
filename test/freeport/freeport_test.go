package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestLoopbackIsFreeDistinctAndBelowTheEphemeralRange: the addresses can
// be listened on, differ, and (where the kernel says its range) lie below
// the ports outgoing connections are given.
func TestLoopbackIsFreeDistinctAndBelowTheEphemeralRange(t *testing.T) {
	addrs, err := Loopback(20)
	if err != nil {
		t.Fatal(err)
	}
	high, known := ephemeralStart()
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s returned twice", a)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if known && (port < lowest || port >= high) {
			t.Errorf("%s: port outside %d–%d", a, lowest, high-1)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		_ = l.Close()
	}
	if !known {
		t.Logf("no %s here: ports from the kernel", rangeFile)
	}
}
