package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"sigs.k8s.io/yaml"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// Kubectl is the kubectl built with the control plane (same version as the
// API server), else the one on PATH, else "".
func (e *Env) Kubectl() string {
	if fi, err := os.Stat(filepath.Join(e.binDir, "kubectl")); err == nil && !fi.IsDir() {
		return filepath.Join(e.binDir, "kubectl")
	}
	if path, err := exec.LookPath("kubectl"); err == nil {
		return path
	}
	return ""
}

// ApplyManifest applies an LLMEndpoint manifest the way a user does: with
// a real kubectl when there is one (see Kubectl), else the same object
// through the Go client. It returns the endpoint's name.
func (e *Env) ApplyManifest(ctx context.Context, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var ep servingv1alpha1.LLMEndpoint
	if err := yaml.UnmarshalStrict(b, &ep); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if kubectl := e.Kubectl(); kubectl != "" {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", e.Cluster.KubeconfigPath,
			"apply", "--namespace", e.opts.Namespace, "-f", path).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("kubectl apply -f %s: %w: %s", path, err, out)
		}
		return ep.Name, nil
	}
	ep.Namespace = e.opts.Namespace
	return ep.Name, e.Client.Create(ctx, &ep)
}
