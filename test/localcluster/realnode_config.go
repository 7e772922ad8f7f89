package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The real node's addresses. They exist only inside the cluster's network
// namespace, so every cluster can use the same ones.
const (
	// NodeIP is the node's address (a /32 on the namespace's loopback):
	// the kubelet's and the API server's advertised address.
	NodeIP = "10.200.0.2"
	// PodSubnet is the bridge's subnet; the bridge (cni0) is its first
	// address and every pod's gateway.
	PodSubnet  = "10.244.0.0/24"
	podGateway = "10.244.0.1"
	// ServiceCIDR holds the Service ClusterIPs; the kubernetes Service is
	// its first address.
	ServiceCIDR     = "10.96.0.0/16"
	kubernetesSvcIP = "10.96.0.1"
	// KubeDNSIP is the kube-dns Service's ClusterIP, the kubelet's
	// clusterDNS (kubeadm's choice: the tenth address).
	KubeDNSIP        = "10.96.0.10"
	apiServerPort    = 6443
	etcdClientURL    = "http://127.0.0.1:2379"
	realNodeName     = "node-0"
	clusterDomain    = "cluster.local"
	containerdSocket = "/run/containerd/containerd.sock"
	// PauseImage is the sandbox image containerd v2.4 pins; the cluster
	// builds a static one under this name, since nothing can be pulled.
	PauseImage = "registry.k8s.io/pause:3.10.2"
)

// realNodeFiles writes the certificates, kubeconfigs and configuration
// files of every component of a real-node cluster into dir.
type realNodeFiles struct {
	dir        string
	cgroupRoot string
	// hostAPIServer is the API server's URL on the host, through the
	// bridged socket: the "kubeconfig" file's. The others are for the
	// components inside the namespace.
	hostAPIServer string
}

func (f realNodeFiles) path(name string) string { return filepath.Join(f.dir, name) }

func (f realNodeFiles) write() error {
	ca, err := NewCA("warmroute-cluster-ca")
	if err != nil {
		return err
	}
	files := map[string][]byte{"ca.crt": ca.PEM}
	serving, servingKey, err := ca.Issue("kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), net.ParseIP(kubernetesSvcIP)})
	if err != nil {
		return err
	}
	files["apiserver.crt"], files["apiserver.key"] = serving, servingKey
	// The API server's client certificate towards the kubelet, which
	// authenticates it against the same CA.
	kc, kk, err := ca.IssueUser("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return err
	}
	files["apiserver-kubelet-client.crt"], files["apiserver-kubelet-client.key"] = kc, kk
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return err
	}
	files["sa.key"] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})

	inside := fmt.Sprintf("https://127.0.0.1:%d", apiServerPort)
	// The kubelet has a node's identity, so that the Node authorizer and
	// NodeRestriction admission treat it as they treat a real kubelet.
	users := []struct {
		file, server, user string
		groups             []string
	}{
		{"admin.kubeconfig", inside, "warmroute-admin", []string{"system:masters"}},
		{"kubeconfig", f.hostAPIServer, "warmroute-admin", []string{"system:masters"}},
		{"kubelet.kubeconfig", inside, "system:node:" + realNodeName, []string{"system:nodes"}},
		{"kube-proxy.kubeconfig", inside, "system:kube-proxy", nil},
	}
	for _, u := range users {
		cert, key, err := ca.IssueUser(u.user, u.groups...)
		if err != nil {
			return err
		}
		b, err := kubeconfigFor(u.server, ca.PEM, cert, key)
		if err != nil {
			return err
		}
		files[u.file] = b
	}
	files["containerd.toml"] = []byte(f.containerdConfig())
	files["cni/10-warmroute.conflist"] = []byte(cniConfig)
	files["kubelet.yaml"] = []byte(f.kubeletConfig())
	// The node's own resolver, for pods with dnsPolicy Default: there is
	// no upstream, so it is the cluster DNS too.
	files["resolv.conf"] = []byte("nameserver " + KubeDNSIP + "\n")
	for name, b := range files {
		p := f.path(name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

func kubeconfigFor(server string, caPEM, certPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	cfg.CurrentContext = "local"
	return clientcmd.Write(*cfg)
}

// containerdConfig: state under the namespace's private /run, images and
// snapshots in the work directory. restrict_oom_score_adj because the
// sandbox lacks CAP_SYS_RESOURCE: runc cannot write the negative
// oom_score_adj the kubelet asks for the pause container and Guaranteed
// pods, and fails with "can't get final child's PID from pipe".
func (f realNodeFiles) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = %q
state = "/run/containerd"

[grpc]
  address = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
`, f.path("containerd"), containerdSocket, f.path("cni"), PauseImage)
}

// cniConfig puts every pod on the cni0 bridge, which the namespace's setup
// creates beforehand so that the node reaches ClusterIPs before the first
// pod exists. hairpinMode lets a pod reach itself through a Service.
var cniConfig = fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "warmroute",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "/run/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, PodSubnet, podGateway)

// kubeletConfig: cgroup v1 is all these machines have, and kubelet v1.37
// refuses it unless failCgroupV1 is false. The cgroups go under a root of
// the cluster's own, which teardown removes. Eviction thresholds are low so
// that a busy shared disk does not taint the only node.
func (f realNodeFiles) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %q
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
clusterDomain: %q
clusterDNS: [%q]
resolvConf: %q
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
`, f.cgroupRoot, containerdSocket, NodeIP, f.path("ca.crt"), clusterDomain, KubeDNSIP, f.path("resolv.conf"))
}
