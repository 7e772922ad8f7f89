package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/warmroute/warmroute/test/process"
)

// realNode is the part of a Cluster that runs in its own network and mount
// namespaces: a holder process keeps them alive and every component enters
// them with nsenter. The API server listens inside on apiServerPort; a unix
// socket in the work directory, served by socat inside, carries the host's
// connections to it (nothing else crosses the namespace's boundary).
type realNode struct {
	holder     *process.Process
	netNS      string // the namespace's identity, as /proc/<pid>/ns/net reads
	cgroupRoot string
	bridge     net.Listener
	bridgeWG   sync.WaitGroup
	nodeBin    string
	log        io.Writer
	start      time.Time
}

// RealNodeMissing names what this machine lacks to run a real node (root,
// nsenter, a cgroup v1 hierarchy, a Debian package) or says "" when nothing
// is missing. Specs that need a real node skip with its message.
func RealNodeMissing() string {
	if os.Geteuid() != 0 {
		return "a real node needs root (network namespaces, mounts, cgroups)"
	}
	for _, cmd := range []string{"nsenter", "unshare", "ip", "mount", "runc", "iptables", "ipset", "conntrack", "socat"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Sprintf("a real node needs %s on PATH (hack/build-node.sh installs the Debian packages)", cmd)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return "a real node needs the CNI plugins in /usr/lib/cni (Debian containernetworking-plugins)"
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		return "a real node needs the kernel's br_netfilter (kube-proxy's rules must see traffic between pods on the bridge)"
	}
	for _, c := range cgroupControllers {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, "cgroup.procs")); err != nil {
			return fmt.Sprintf("a real node needs the cgroup v1 %s hierarchy at /sys/fs/cgroup/%s", c, c)
		}
	}
	return ""
}

// cgroupControllers are the v1 hierarchies the kubelet and runc use.
var cgroupControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd"}

func (n *realNode) phase(format string, args ...any) {
	_, _ = fmt.Fprintf(n.log, "localcluster: [%5.1fs] %s\n", time.Since(n.start).Seconds(), fmt.Sprintf(format, args...))
}

// startRealNode starts every component in order and returns once the node
// is Ready.
func (c *Cluster) startRealNode(ctx context.Context, opts Options) error {
	n := &realNode{nodeBin: opts.NodeBinDir, log: opts.Log, start: time.Now()}
	c.node = n
	n.cgroupRoot = "/warmroute-" + filepath.Base(c.WorkDir)
	n.phase("starting a real node in %s", c.WorkDir)

	var err error
	if n.bridge, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return fmt.Errorf("listen for the API server bridge: %w", err)
	}
	files := realNodeFiles{dir: c.WorkDir, cgroupRoot: n.cgroupRoot, hostAPIServer: "https://" + n.bridge.Addr().String()}
	if err := files.write(); err != nil {
		return err
	}
	c.KubeconfigPath = files.path("kubeconfig")
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.KubeconfigPath); err != nil {
		return err
	}
	for _, ctrl := range cgroupControllers {
		if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", ctrl, n.cgroupRoot), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s in %s: %w", n.cgroupRoot, ctrl, err)
		}
	}
	if err := c.startNamespace(); err != nil {
		return err
	}
	n.phase("network and mount namespaces ready (node IP %s, pods %s, Services %s)", NodeIP, PodSubnet, ServiceCIDR)

	// The API server reaches aggregated APIs (the operator's custom
	// metrics) and webhooks through their Services' ClusterIPs.
	aggArgs, err := aggregationArgs(c.WorkDir)
	if err != nil {
		return fmt.Errorf("configure the aggregation layer: %w", err)
	}
	sock := filepath.Join(c.WorkDir, "apiserver.sock")
	steps := []struct {
		name, bin string
		args      []string
	}{
		{"etcd", filepath.Join(opts.BinDir, "etcd"), []string{
			"--data-dir=" + filepath.Join(c.WorkDir, "etcd"),
			"--listen-client-urls=" + etcdClientURL, "--advertise-client-urls=" + etcdClientURL,
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=default=http://127.0.0.1:2380", "--unsafe-no-fsync",
		}},
		{"apiserver-bridge", "socat", []string{"UNIX-LISTEN:" + sock + ",fork,unlink-early", fmt.Sprintf("TCP:127.0.0.1:%d", apiServerPort)}},
		{"kube-apiserver", filepath.Join(opts.BinDir, "kube-apiserver"), append(apiServerArgs(files), aggArgs...)},
	}
	for _, s := range steps {
		if err := c.runInside(s.name, s.bin, s.args); err != nil {
			return err
		}
	}
	n.bridgeWG.Add(1)
	go n.serveBridge(sock)
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(b) == "ok", nil
	}); err != nil {
		return fmt.Errorf("API server not ready within 90s; see %s: %w", filepath.Join(c.WorkDir, "kube-apiserver.log"), err)
	}
	n.phase("etcd and the API server ready")

	admin := files.path("admin.kubeconfig")
	if err := c.runInside("kube-controller-manager", filepath.Join(opts.BinDir, "kube-controller-manager"),
		append(controllerManagerArgs(admin), "--root-ca-file="+files.path("ca.crt"))); err != nil {
		return err
	}
	if err := c.runInside("kube-scheduler", filepath.Join(opts.BinDir, "kube-scheduler"), schedulerArgs(admin)); err != nil {
		return err
	}
	if err := c.runInside("containerd", filepath.Join(n.nodeBin, "containerd"), []string{"--config=" + files.path("containerd.toml")}); err != nil {
		return err
	}
	if err := n.waitFile(ctx, containerdSocketOnHost(n), 30*time.Second); err != nil {
		return fmt.Errorf("containerd: %w; see %s", err, filepath.Join(c.WorkDir, "containerd.log"))
	}
	images := append([]string{filepath.Join(c.WorkDir, "node-images.tar")}, opts.Images...)
	if err := buildNodeImages(ctx, images[0], n.nodeBin); err != nil {
		return err
	}
	if err := c.LoadImages(ctx, images...); err != nil {
		return err
	}
	n.phase("containerd ready, %d image archive(s) loaded", len(images))

	if err := c.runInside("kubelet", filepath.Join(opts.BinDir, "kubelet"), []string{
		"--config=" + files.path("kubelet.yaml"),
		"--kubeconfig=" + files.path("kubelet.kubeconfig"),
		"--hostname-override=" + realNodeName,
		"--node-ip=" + NodeIP,
		"--root-dir=/var/lib/kubelet",
		"--v=1",
	}); err != nil {
		return err
	}
	// kube-proxy: no conntrack sysctls, which are not per network
	// namespace and would change the host's.
	if err := c.runInside("kube-proxy", filepath.Join(opts.BinDir, "kube-proxy"), []string{
		"--kubeconfig=" + files.path("kube-proxy.kubeconfig"),
		"--hostname-override=" + realNodeName,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + PodSubnet,
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(ctx, realNodeName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("the kubelet did not register node %s within 60s; see %s: %w", realNodeName, filepath.Join(c.WorkDir, "kubelet.log"), err)
	}
	n.phase("node %s registered", realNodeName)
	// kube-router reads its own Node object at start.
	if err := c.runInside("kube-router", filepath.Join(n.nodeBin, "kube-router"), []string{
		"--kubeconfig=" + admin,
		"--hostname-override=" + realNodeName,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false", "--enable-ipv6=false",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--metrics-port=0", "--health-port=0",
	}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, realNodeName, metav1.GetOptions{})
		return err == nil && countReady([]corev1.Node{*node}) == 1, nil
	}); err != nil {
		return fmt.Errorf("node %s not Ready within 90s; see %s: %w", realNodeName, filepath.Join(c.WorkDir, "kubelet.log"), err)
	}
	n.phase("node %s Ready", realNodeName)
	if err := c.startClusterDNS(ctx, opts.BinDir); err != nil {
		return err
	}
	n.phase("cluster DNS Ready (CoreDNS pod behind kube-dns %s)", KubeDNSIP)
	return nil
}

func apiServerArgs(f realNodeFiles) []string {
	return []string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=0.0.0.0",
		fmt.Sprintf("--secure-port=%d", apiServerPort),
		"--advertise-address=" + NodeIP,
		"--cert-dir=" + f.path("apiserver"),
		"--tls-cert-file=" + f.path("apiserver.crt"),
		"--tls-private-key-file=" + f.path("apiserver.key"),
		"--client-ca-file=" + f.path("ca.crt"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc." + clusterDomain,
		"--service-account-key-file=" + f.path("sa.key"),
		"--service-account-signing-key-file=" + f.path("sa.key"),
		"--authorization-mode=Node,RBAC",
		// PodSecurity, ServiceAccount and the webhooks are on by default.
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + f.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + f.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=true",
	}
}

// startNamespace starts the holder: new network and mount namespaces in
// which /run, /var/lib and /var/log are private tmpfs mounts (containerd,
// runc, CNI and the kubelet write fixed paths there), the node IP is on
// loopback, and the pods' bridge exists with a route for the Service CIDR
// (the namespace has no default route, so without it the node itself could
// not reach a ClusterIP).
func (c *Cluster) startNamespace() error {
	ready := filepath.Join(c.WorkDir, "namespace.ready")
	script := strings.Join([]string{
		"set -e",
		"for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=755 tmpfs $d; done",
		"ip link set lo up",
		"ip addr add " + NodeIP + "/32 dev lo",
		"ip link add cni0 type bridge",
		"ip addr add " + podGateway + "/24 dev cni0",
		"ip link set cni0 up",
		"ip route add " + ServiceCIDR + " dev cni0 src " + NodeIP,
		"echo 1 > /proc/sys/net/ipv4/ip_forward",
		// Replies between two pods on the bridge must pass iptables too,
		// or a reply to a ClusterIP connection skips kube-proxy's un-DNAT.
		"echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables",
		"touch " + ready,
		"exec sleep infinity",
	}, "\n")
	p, err := process.Start("namespace", "unshare", []string{"--net", "--mount", "--propagation", "private", "sh", "-c", script}, c.WorkDir)
	if err != nil {
		return err
	}
	c.node.holder = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		log := filepath.Join(c.WorkDir, "namespace.log")
		if ok, werr := p.Exited(); ok {
			return fmt.Errorf("set up the cluster's namespaces: %w; see %s", werr, log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("set up the cluster's namespaces: not ready after 10 s; see %s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.Pid()))
	if err != nil {
		return err
	}
	c.node.netNS = ns
	return c.node.startReaper()
}

// startReaper starts a watchdog that does what stop does if this process
// dies without calling it (`go test -timeout`, a crash): the components
// die with it (Pdeathsig), but containerd's shims and the containers do
// not. After a clean stop (the holder gone first) it finds nothing left.
func (n *realNode) startReaper() error {
	var ctrls []string
	for _, c := range cgroupControllers {
		ctrls = append(ctrls, filepath.Join("/sys/fs/cgroup", c, n.cgroupRoot))
	}
	script := fmt.Sprintf(`owner=%d holder=%d ns='%s' cgroups='%s'
while kill -0 $owner 2>/dev/null && kill -0 $holder 2>/dev/null; do sleep 1; done
for i in 1 2 3 4 5 6 7 8 9 10; do
  for p in /proc/[0-9]*; do [ "$(readlink $p/ns/net 2>/dev/null)" = "$ns" ] && kill -9 ${p#/proc/} 2>/dev/null; done
  for d in $cgroups; do [ -d $d ] && find $d -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  sleep 1
done
for d in $cgroups; do [ -d $d ] && find $d -depth -type d -exec rmdir {} + 2>/dev/null; done
exit 0`, os.Getpid(), n.holder.Pid(), n.netNS, strings.Join(ctrls, " "))
	cmd := exec.Command("/bin/sh", "-c", script)
	// Its own session: not in the test's process group, not killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the real node's reaper: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// runInside starts a component inside the cluster's namespaces. nsenter
// execs the binary, so the process is the component itself.
func (c *Cluster) runInside(name, bin string, args []string) error {
	nsArgs := append([]string{"-t", strconv.Itoa(c.node.holder.Pid()), "-m", "-n", "--", bin}, args...)
	return c.startProcess(name, "nsenter", nsArgs,
		"PATH="+c.node.nodeBin+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
}

// Inside runs a command in the cluster's namespaces (ctr, iptables, ip)
// and returns its combined output.
func (c *Cluster) Inside(ctx context.Context, bin string, args ...string) ([]byte, error) {
	if c.node == nil {
		return nil, errors.New("localcluster: not a real-node cluster")
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(c.node.holder.Pid()), "-m", "-n", "--", bin}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// LoadImages imports docker-save archives into the node's containerd, in
// the namespace the kubelet uses; pods run them with imagePullPolicy Never
// (or IfNotPresent), since nothing can be pulled.
func (c *Cluster) LoadImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if _, err := c.Inside(ctx, filepath.Join(c.node.nodeBin, "ctr"), "--address", containerdSocket, "-n", "k8s.io", "images", "import", a); err != nil {
			return fmt.Errorf("load image archive %s: %w", a, err)
		}
	}
	return nil
}

func containerdSocketOnHost(n *realNode) string {
	return fmt.Sprintf("/proc/%d/root%s", n.holder.Pid(), containerdSocket)
}

func (n *realNode) waitFile(ctx context.Context, path string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
}

// serveBridge carries each host connection to the API server's socket.
func (n *realNode) serveBridge(sock string) {
	defer n.bridgeWG.Done()
	for {
		conn, err := n.bridge.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			up, err := net.Dial("unix", sock)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
			go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// stop ends everything the node started: every process in the cluster's
// network namespace (the components, containerd's shims) and in its
// cgroups (the containers, which have namespaces of their own); the
// namespaces go with their last process, taking the tmpfs mounts, the
// pods' network namespaces, veths and iptables rules with them. Then it
// removes the cgroups.
func (n *realNode) stop() error {
	var errs []error
	if n.bridge != nil {
		_ = n.bridge.Close()
		n.bridgeWG.Wait()
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := n.processes()
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("processes of the cluster still alive after SIGKILL: %v", pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n.holder != nil {
		_ = n.holder.Stop(time.Second)
	}
	if n.cgroupRoot != "" {
		for _, ctrl := range cgroupControllers {
			if err := removeCgroupTree(filepath.Join("/sys/fs/cgroup", ctrl, n.cgroupRoot)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	n.phase("stopped; namespaces, mounts and cgroups removed")
	return errors.Join(errs...)
}

// processes lists the live processes in the cluster's network namespace or
// under its cgroup root.
func (n *realNode) processes() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if n.Owns(pid) && process.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Owns reports whether pid belongs to the cluster: in its network
// namespace or in one of its cgroups.
func (n *realNode) Owns(pid int) bool {
	if n.netNS != "" {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && ns == n.netNS {
			return true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == n.cgroupRoot || strings.HasPrefix(parts[2], n.cgroupRoot+"/")) {
			return true
		}
	}
	return false
}

// removeCgroupTree removes a cgroup v1 directory and its children, deepest
// first (a cgroup directory is removed with rmdir, never its files).
func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var rmErr error
	for range 50 { // a cgroup stays busy for a moment after its last task exits
		if rmErr = syscall.Rmdir(dir); rmErr == nil || errors.Is(rmErr, syscall.ENOENT) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, rmErr)
}

func (c *Cluster) installCRDs(dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	_, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: dirs, ErrorIfPathMissing: true})
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	return nil
}
