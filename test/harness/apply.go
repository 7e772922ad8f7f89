package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"sigs.k8s.io/yaml"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// ApplyManifest applies an LLMEndpoint manifest the way a user does: with
// the real kubectl when the machine has one, else the same object through
// the Go client. It returns the endpoint's name.
func (e *Env) ApplyManifest(ctx context.Context, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var ep servingv1alpha1.LLMEndpoint
	if err := yaml.UnmarshalStrict(b, &ep); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
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
