package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BinDir finds the control-plane binaries: $KUBEBUILDER_ASSETS when set, else
// the cache that hack/build-controlplane.sh fills (building it the first
// time, which takes ~20 minutes). Tests call it so that a bare `go test`
// works as well as `make test`.
func BinDir() (string, error) { return cachedBinaries("KUBEBUILDER_ASSETS", "build-controlplane.sh") }

// NodeBinDir finds the real node's binaries other than Kubernetes' own
// (containerd, kube-router, CoreDNS): $WARMROUTE_NODE_ASSETS when set, else
// the cache that hack/build-node.sh fills (~5 minutes the first time).
func NodeBinDir() (string, error) { return cachedBinaries("WARMROUTE_NODE_ASSETS", "build-node.sh") }

func cachedBinaries(env, script string) (string, error) {
	if dir := os.Getenv(env); dir != "" {
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", script))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s: %w", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RepoRoot is the checkout this package lives in (found from the working
// directory upwards), for tests that need config/ or hack/.
func RepoRoot() (string, error) { return repoRoot() }

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-controlplane.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localcluster: not inside the warmroute checkout")
		}
		dir = parent
	}
}

// APIServer starts an API server (with etcd) from BinDir's binaries for
// one test, with the CRDs in crdDirs installed (each must exist), stopped
// when it ends, and returns its client config.
func APIServer(t testing.TB, crdDirs ...string) *rest.Config {
	t.Helper()
	binDir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: binDir, CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: len(crdDirs) > 0}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the API server: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cfg
}
