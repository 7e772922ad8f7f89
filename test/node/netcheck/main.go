// Command netcheck is the client pod of test/node's NetworkPolicy and DNS
// specs: it tries to open a TCP connection to each address it is given (a
// host name goes through the pod's resolver) until one attempt connects or
// its patience runs out, prints the address it reached, and exits 0 when
// every address connected, 1 when any never did, so the pod's phase
// (Succeeded or Failed) is the answer.
package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

// patience covers the network plugin's catching up with a new pod: a
// policy admits peers by their pod IPs, which it learns from the API
// server some time after the pod starts, so an allowed client's first
// attempts may be refused. A refused peer is refused for all of it.
const patience = 15 * time.Second

func main() {
	failed := len(os.Args) < 2
	for _, addr := range os.Args[1:] {
		remote, err := connect(addr)
		if err != nil {
			fmt.Printf("%s: %v\n", addr, err)
			failed = true
			continue
		}
		fmt.Printf("%s: connected to %s\n", addr, remote)
	}
	if failed {
		os.Exit(1)
	}
}

func connect(addr string) (string, error) {
	deadline := time.Now().Add(patience)
	for {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			return conn.RemoteAddr().String(), conn.Close()
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(500 * time.Millisecond)
	}
}
