package main

import (
	"flag"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// upstreamFlags bound the router's wait on a backend.
type upstreamFlags struct {
	responseHeaderTimeout time.Duration
}

func (u *upstreamFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&u.responseHeaderTimeout, "response-header-timeout", proxy.DefaultResponseHeaderTimeout,
		"longest wait for a backend's response headers on a request that is not streamed, which come with the whole completion (a stream waits --stream-idle-timeout); past it the client gets 504 and the backend is ejected")
}

// listenerServer is an HTTP server on one of the router's listeners with
// the client-facing limits: header size (431 above), header time, idle
// keep-alive; net/http's own errors go to the structured log. The traffic
// and metrics listeners both have them: either is a port anyone the
// NetworkPolicy admits can open connections to, and net/http's defaults
// (1 MiB of headers, idle connections kept for ever) let a few clients
// hold the router's memory and file descriptors.
func listenerServer(addr string, f *flags, h http.Handler, log logr.Logger) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: f.readHeaderTimeout, IdleTimeout: f.idleTimeout,
		MaxHeaderBytes: f.maxHeaderBytes, ErrorLog: proxy.StdLogger(log.WithName("http"))}
}
