package localcluster

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// corednsManifest is the cluster DNS: CoreDNS as a Deployment behind the
// kube-dns Service at KubeDNSIP, the kubelet's clusterDNS.
//
//go:embed coredns.yaml
var corednsManifest string

// CoreDNSImage is hack/build-node.sh's CoreDNS on the minimal base; the
// cluster loads it with the pause image.
const CoreDNSImage = "warmroute.test/coredns:node"

// startClusterDNS applies the CoreDNS manifest with the control plane's
// kubectl and waits until its pod is Ready, so that Service names resolve
// in every pod the caller creates.
func (c *Cluster) startClusterDNS(ctx context.Context, binDir string) error {
	manifest := strings.NewReplacer("COREDNS_IMAGE", CoreDNSImage, "KUBE_DNS_IP", KubeDNSIP).Replace(corednsManifest)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kubectl"), "--kubeconfig="+c.KubeconfigPath, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apply the CoreDNS manifest: %w: %s", err, out.Bytes())
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1, nil
	}); err != nil {
		return fmt.Errorf("CoreDNS not Ready within 90s (kubectl -n kube-system describe pods -l k8s-app=kube-dns): %w", err)
	}
	return nil
}
