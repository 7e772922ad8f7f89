package main

import (
	"context"
	"fmt"
	"net"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"github.com/warmroute/warmroute/sidecar/router/epp"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// serveEPP serves the Endpoint Picker Protocol on --epp-listen (nothing
// without it). Every replica may serve it: a replica that is not the
// picker asks the picker, as its proxy does. stop ends it: open streams
// (requests in flight through the gateway) may finish until ctx ends.
func serveEPP(addr string, r *proxy.Router, log logr.Logger, errc chan<- error) (stop func(ctx context.Context), err error) {
	if addr == "" {
		return func(context.Context) {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--epp-listen: %w", err)
	}
	log.Info("listening", "address", ln.Addr().String(), "protocol", "endpoint picker (ext_proc)")
	g := grpc.NewServer()
	epp.New(r, log.WithName("epp")).Register(g)
	go func() {
		if err := g.Serve(ln); err != nil {
			errc <- fmt.Errorf("serve %s: %w", addr, err)
		}
	}()
	return func(ctx context.Context) {
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			g.Stop()
		}
	}, nil
}
