package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/warmroute/warmroute/sidecar/router/epp"
	"github.com/warmroute/warmroute/sidecar/router/epp/epptest"
)

// TestEPPListener: with --epp-listen and its TLS files the router serves
// the ext_proc service's gRPC health to a gateway with a client
// certificate (the protocol itself is tested in router/epp), to no
// plaintext caller, and shuts it down with the rest.
func TestEPPListener(t *testing.T) {
	t.Run("beside the proxy", func(t *testing.T) { testEPPListener(t, false) })
	// An InferencePool's picker (the operator's mode InferencePool).
	t.Run("picker only", func(t *testing.T) { testEPPListener(t, true) })
}

func testEPPListener(t *testing.T, pickerOnly bool) {
	backend := httptest.NewServer(http.NotFoundHandler())
	defer backend.Close()
	pki := epptest.NewPKI(t)
	addr := freeAddr(t)
	args := []string{"--epp-listen", addr, "--drain-delay", "0",
		"--epp-tls-cert-file", pki.CertFile, "--epp-tls-key-file", pki.KeyFile, "--epp-client-ca-file", pki.CAFile}
	proxyAddr := freeAddr(t)
	if pickerOnly {
		args = append(args, "--listen=")
	} else {
		args = append(args, "--listen", proxyAddr)
	}
	_, cancel, done := startRouter(t, backend.URL, logr.Discard(), args...)
	if _, err := net.Dial("tcp", proxyAddr); (err == nil) == pickerOnly {
		t.Errorf("picker only %v: dial the proxy address: %v", pickerOnly, err)
	}
	check := func(creds credentials.TransportCredentials) (*healthpb.HealthCheckResponse, error) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cc.Close() }()
		return healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: epp.ServiceName})
	}
	if h, err := check(credentials.NewTLS(pki.GatewayTLS(t))); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", h, err)
	}
	if h, err := check(insecure.NewCredentials()); err == nil {
		t.Fatalf("a plaintext caller was answered: %v", h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
