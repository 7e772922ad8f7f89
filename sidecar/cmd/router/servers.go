package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// listenerServer is an HTTP server on the traffic or metrics listener with
// the client-facing limits: header size (431 above), header time, idle
// keep-alive; net/http's own errors go to the structured log. Either port
// is one anyone the NetworkPolicy admits can open connections to, and
// net/http's defaults (1 MiB of headers, idle connections kept for ever)
// let a few clients hold the router's memory and file descriptors.
func listenerServer(addr string, f *flags, h http.Handler, conns *unusedConns, log logr.Logger) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: f.readHeaderTimeout, IdleTimeout: f.idleTimeout,
		MaxHeaderBytes: f.maxHeaderBytes, ErrorLog: proxy.StdLogger(log.WithName("http")), ConnState: conns.track}
}

// unusedConnGrace is how long a connection may have been open without
// sending a byte before shutdown closes it. A request's first bytes follow
// its connection within milliseconds; a connection silent for a second is
// one a client dialled ahead and then did not need (Go's and Envoy's
// clients do this under concurrency).
const unusedConnGrace = time.Second

// unusedConns tracks the connections a server accepted that have not yet
// sent a request. http.Server.Shutdown waits up to 5 s for them (Go issue
// 22682), so one such connection held every shutdown that long, or failed
// it under a shorter --shutdown-timeout, although closing them loses
// nothing: no request was read from them.
type unusedConns struct {
	mu    sync.Mutex
	since map[net.Conn]time.Time
}

func newUnusedConns() *unusedConns {
	return &unusedConns{since: map[net.Conn]time.Time{}}
}

// track is an http.Server.ConnState hook.
func (u *unusedConns) track(c net.Conn, s http.ConnState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s == http.StateNew {
		u.since[c] = time.Now()
		return
	}
	delete(u.since, c)
}

// closeOlder closes the unused connections open for longer than age and
// returns how many it closed.
func (u *unusedConns) closeOlder(age time.Duration) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for c, t := range u.since {
		if time.Since(t) > age {
			_ = c.Close()
			delete(u.since, c)
			n++
		}
	}
	return n
}

// shutdownServers shuts the servers down in order, letting in-flight
// requests finish until ctx ends, and meanwhile closes the connections
// that never sent a request. The order matters: the admin server, last,
// keeps answering peers and scrapes while the traffic server drains. It
// returns the first server's error: the others serve the router's own
// endpoints.
func shutdownServers(ctx context.Context, conns *unusedConns, log logr.Logger, srvs ...*http.Server) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() {
		t := time.NewTicker(unusedConnGrace / 10)
		defer t.Stop()
		for {
			if n := conns.closeOlder(unusedConnGrace); n > 0 {
				log.Info("closed connections that sent no request", "count", n)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	err := srvs[0].Shutdown(ctx)
	for _, s := range srvs[1:] {
		_ = s.Shutdown(ctx)
	}
	return err
}
