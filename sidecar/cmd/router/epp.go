package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/warmroute/warmroute/sidecar/router/epp"
	"github.com/warmroute/warmroute/sidecar/router/proxy"
)

// eppFlags configure the Endpoint Picker Protocol's port.
type eppFlags struct {
	listen                          string
	certFile, keyFile, clientCAFile string
	insecure                        bool
	maxStreams, maxConns            int
}

// defaultEPPMaxConns bounds the connections open at once on the port: a
// gateway multiplexes its streams over a few long-lived connections (one
// per Envoy worker thread), so hundreds cover every gateway replica, and
// the bound keeps a flood of connections from holding descriptors.
const defaultEPPMaxConns = 512

func (e *eppFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.listen, "epp-listen", "", "address of the Endpoint Picker Protocol (Envoy ext_proc v3 gRPC, with gRPC health) for a Gateway's InferencePool (\"\": not served); needs --epp-tls-cert-file, --epp-tls-key-file and --epp-client-ca-file, or --epp-insecure")
	fs.StringVar(&e.certFile, "epp-tls-cert-file", "", "the --epp-listen serving certificate (PEM), read again when it changes")
	fs.StringVar(&e.keyFile, "epp-tls-key-file", "", "the serving certificate's private key (PEM)")
	fs.StringVar(&e.clientCAFile, "epp-client-ca-file", "", "CA bundle (PEM) that signs the gateway's client certificate: --epp-listen answers only a caller with a certificate it signed; read again when it changes")
	fs.BoolVar(&e.insecure, "epp-insecure", false, "serve --epp-listen without TLS, to any caller that reaches it: it then hands out placements and salted bodies to anyone (tests, or a network where only the gateway can connect)")
	fs.IntVar(&e.maxStreams, "epp-max-streams", epp.DefaultMaxStreams, "ext_proc streams open at once on --epp-listen (one per request in flight through the gateway); past it a stream is refused")
	fs.IntVar(&e.maxConns, "epp-max-connections", defaultEPPMaxConns, "connections open at once on --epp-listen; past it new ones wait")
}

func (e *eppFlags) validate() error {
	files := e.certFile != "" || e.keyFile != "" || e.clientCAFile != ""
	all := e.certFile != "" && e.keyFile != "" && e.clientCAFile != ""
	switch {
	case e.listen == "" && (files || e.insecure):
		return errors.New("--epp-tls-*, --epp-client-ca-file and --epp-insecure need --epp-listen")
	case e.listen == "":
	case e.insecure && files:
		return errors.New("--epp-insecure and --epp-tls-cert-file/--epp-tls-key-file/--epp-client-ca-file are exclusive")
	case !e.insecure && !all:
		return errors.New("--epp-listen needs --epp-tls-cert-file, --epp-tls-key-file and --epp-client-ca-file (the gateway proves itself with a client certificate), or --epp-insecure")
	}
	if e.maxStreams < 1 || e.maxConns < 1 {
		return errors.New("--epp-max-streams and --epp-max-connections must be at least 1")
	}
	return nil
}

// serveEPP serves the Endpoint Picker Protocol on --epp-listen (nothing
// without it). Every replica may serve it: a replica that is not the
// picker asks the picker, as its proxy does. stop ends it: open streams
// (requests in flight through the gateway) may finish until ctx ends.
// watchCtx ends the certificate watches.
func serveEPP(watchCtx context.Context, f *flags, r *proxy.Router, log logr.Logger, errc chan<- error) (stop func(ctx context.Context), err error) {
	e := f.epp
	if e.listen == "" {
		return func(context.Context) {}, nil
	}
	s := epp.New(r, log.WithName("epp"), epp.Options{MaxHeaderBytes: f.maxHeaderBytes, MaxStreams: e.maxStreams})
	// The certificate watch logs through controller-runtime's logger.
	ctrllog.SetLogger(log.WithName("epp"))
	var cfg *tls.Config
	if e.insecure {
		log.Info("warning: --epp-insecure: the Endpoint Picker Protocol is served without TLS to any caller that reaches it")
	} else if cfg, err = epp.ServerTLS(watchCtx, e.certFile, e.keyFile, e.clientCAFile, log.WithName("epp")); err != nil {
		return nil, fmt.Errorf("--epp-listen TLS: %w", err)
	}
	g := epp.NewGRPCServer(s, cfg)
	ln, err := net.Listen("tcp", e.listen)
	if err != nil {
		return nil, fmt.Errorf("--epp-listen: %w", err)
	}
	log.Info("listening", "address", ln.Addr().String(), "protocol", "endpoint picker (ext_proc)", "tls", !e.insecure)
	go func() {
		if err := g.Serve(netutil.LimitListener(ln, e.maxConns)); err != nil {
			errc <- fmt.Errorf("serve %s: %w", e.listen, err)
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
