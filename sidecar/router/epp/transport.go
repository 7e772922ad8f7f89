package epp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// Transport bounds of the protocol's gRPC server.
const (
	// maxRecvMessage bounds one message from the gateway. Envoy sends the
	// body as it reads it, each piece bounded by its per-connection buffer
	// limit (1 MiB by default); a message of headers is bounded tighter by
	// MaxHeaderBytes. gRPC's own default is 4 MiB.
	maxRecvMessage = 2 << 20
	// maxGRPCHeaderList bounds the gRPC call's own HTTP/2 header list (its
	// metadata, not the proxied request's headers), which gRPC otherwise
	// accepts up to 16 MiB.
	maxGRPCHeaderList = 64 << 10
	// handshakeTimeout bounds a connection's TLS handshake: a connection
	// that never completes one holds a goroutine and a descriptor.
	handshakeTimeout = 10 * time.Second
)

// NewGRPCServer is the protocol's gRPC server with s registered: TLS with
// a required client certificate when tlsConfig is not nil (ServerTLS),
// plaintext otherwise, and the transport's bounds.
func NewGRPCServer(s *Server, tlsConfig *tls.Config) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvMessage),
		grpc.MaxHeaderListSize(maxGRPCHeaderList),
		grpc.MaxConcurrentStreams(uint32(s.opts.MaxStreams)),
		grpc.ConnectionTimeout(handshakeTimeout),
		// A gateway's connection is long-lived and multiplexes its streams:
		// one idle for 5 minutes is closed (the gateway opens another), a
		// silent peer is found within a minute and a half, and pings closer
		// than 10 s apart (Envoy configures its keepalive in seconds and
		// more) are refused as a ping flood.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	g := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s)
	return g
}

// ServerTLS is the TLS configuration of the protocol's port: the serving
// certificate from certFile and keyFile, and a client certificate signed
// by a CA of caFile required of every connection. Each file is read again
// when it changes (a mounted Secret's files change with the Secret,
// cert-manager's renewals among them); a file that no longer parses is
// logged and the last good one kept. The watch ends with ctx.
func ServerTLS(ctx context.Context, certFile, keyFile, caFile string, log logr.Logger) (*tls.Config, error) {
	cw, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	cas := &clientCAs{file: caFile, log: log}
	if err := cas.reload(); err != nil {
		return nil, err
	}
	go func() {
		if err := cw.Start(ctx); err != nil {
			log.Error(err, "serving certificate watch stopped", "cert", certFile)
		}
	}()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The client CAs are read per connection: a gateway's connection
		// is long-lived, so this is rare, and it picks up a new CA bundle
		// without a restart.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:     tls.VersionTLS12,
				NextProtos:     []string{"h2"},
				GetCertificate: cw.GetCertificate,
				ClientAuth:     tls.RequireAndVerifyClientCert,
				ClientCAs:      cas.current(),
			}, nil
		},
	}, nil
}

// clientCAs is the client CA bundle of a file, read again when the file
// is another (the symlink swap of a Secret volume) or was rewritten.
type clientCAs struct {
	file string
	log  logr.Logger
	mu   sync.Mutex
	seen os.FileInfo
	pool *x509.CertPool
}

func (c *clientCAs) current() *x509.CertPool {
	if err := c.reload(); err != nil {
		c.log.Error(err, "client CA bundle not reloaded; the last good one stays")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pool
}

// reload reads the file when it changed since the last good read.
func (c *clientCAs) reload() error {
	fi, err := os.Stat(c.file)
	if err != nil {
		return fmt.Errorf("client CA bundle: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen != nil && os.SameFile(c.seen, fi) && c.seen.ModTime().Equal(fi.ModTime()) && c.seen.Size() == fi.Size() {
		return nil
	}
	pem, err := os.ReadFile(c.file)
	if err != nil {
		return fmt.Errorf("client CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("client CA bundle %s: no PEM certificate in it", c.file)
	}
	c.seen, c.pool = fi, pool
	return nil
}
