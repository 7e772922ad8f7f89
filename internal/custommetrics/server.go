package custommetrics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/pflag"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
)

// ServerOptions configure the custom metrics API server.
type ServerOptions struct {
	// Port is the HTTPS port the API server's aggregator reaches.
	Port int
	// CertDir holds the serving certificate as apiserver.crt and
	// apiserver.key, where OLM mounts the one it issues for an owned API
	// service and where config/default mounts cert-manager's, or as
	// tls.crt and tls.key. Without either pair the server makes a
	// self-signed one there, which only an APIService with
	// insecureSkipTLSVerify accepts.
	CertDir string
	// Kubeconfig, when set, is used to reach the API server for delegated
	// authentication and authorization; empty means in-cluster.
	Kubeconfig string
}

// Server is the custom metrics API server, a manager.Runnable.
type Server struct {
	adapter *basecmd.AdapterBase
}

// NewServer builds the server around p. Its options go through the
// library's own flag set, so that every option it does not set here keeps
// the library's default.
func NewServer(opts ServerOptions, p *Provider) (*Server, error) {
	a := &basecmd.AdapterBase{
		Name:    "warmroute-custom-metrics",
		FlagSet: pflag.NewFlagSet("custom-metrics", pflag.ContinueOnError),
	}
	args := []string{"--secure-port=" + strconv.Itoa(opts.Port)}
	crt, key := filepath.Join(opts.CertDir, "tls.crt"), filepath.Join(opts.CertDir, "tls.key")
	if fileExists(crt) && fileExists(key) {
		args = append(args, "--tls-cert-file="+crt, "--tls-private-key-file="+key)
	} else {
		// apiserver.crt and apiserver.key in it, or a new pair there. The
		// generic API server reloads the files when they are renewed.
		args = append(args, "--cert-dir="+opts.CertDir)
	}
	if opts.Kubeconfig != "" {
		args = append(args, "--lister-kubeconfig="+opts.Kubeconfig,
			"--authentication-kubeconfig="+opts.Kubeconfig,
			"--authorization-kubeconfig="+opts.Kubeconfig)
	}
	if err := a.Flags().Parse(args); err != nil {
		return nil, fmt.Errorf("custom metrics server options: %w", err)
	}
	a.WithCustomMetrics(p)
	// Build now, so that a bad certificate or an unreachable API server
	// fails the operator's start rather than a later HPA sync.
	if _, err := a.Server(); err != nil {
		return nil, fmt.Errorf("build the custom metrics server: %w", err)
	}
	return &Server{adapter: a}, nil
}

// NeedLeaderElection is false: every operator replica serves the API
// behind the one Service.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if err := s.adapter.Run(ctx); err != nil {
		return fmt.Errorf("serve the custom metrics API: %w", err)
	}
	return nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
