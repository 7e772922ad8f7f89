// Package localcluster starts a working Kubernetes cluster on this machine
// from binaries built by hack/build-controlplane.sh, in one of two shapes.
//
// By default: etcd and kube-apiserver (through controller-runtime's
// envtest), kube-controller-manager, kube-scheduler, and KWOK playing the
// kubelet for fake GPU nodes. Pods get IPs inside a loopback range
// (127.1.0.0/16 by default), so a test can bind a real server on each pod's
// own address and send it traffic.
//
// With Options.RealNode (realnode.go): the whole cluster inside network and
// mount namespaces of its own, with one real kubelet node (containerd,
// runc, bridge CNI, kube-proxy, kube-router for NetworkPolicy, from
// hack/build-node.sh) that runs the pod specs as containers, and CoreDNS
// as a pod behind the kube-dns Service; the host reaches the API server
// through a bridged socket.
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/warmroute/warmroute/test/process"
)

// GPUResource is the extended resource the fake nodes advertise.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// fakeNodeAnnotation marks the nodes KWOK manages (and only those).
const fakeNodeAnnotation = "kwok.x-k8s.io/node"

// Options says what to start. The zero value starts only etcd and the API
// server, like envtest; set the booleans for a cluster that runs pods.
type Options struct {
	// BinDir holds the binaries; default $KUBEBUILDER_ASSETS.
	BinDir string
	// WorkDir receives the kubeconfig, logs and state; default a new temp dir
	// (removed by Stop).
	WorkDir string
	// CRDDirectoryPaths are installed before Start returns.
	CRDDirectoryPaths []string
	// Nodes is the number of fake GPU nodes (default 2) and GPUsPerNode the
	// nvidia.com/gpu capacity of each (default 8).
	Nodes       int
	GPUsPerNode int
	// PodCIDR is where pod IPs come from; keep it in 127.0.0.0/8 so that pod
	// addresses are reachable on this machine. Default 127.1.0.1/16.
	PodCIDR string
	// ControllerManager runs kube-controller-manager (Deployments,
	// ReplicaSets, garbage collection, HorizontalPodAutoscalers).
	ControllerManager bool
	// Scheduler runs kube-scheduler.
	Scheduler bool
	// KWOK runs KWOK and creates the fake nodes.
	KWOK bool
	// Aggregation configures the API server to forward to aggregated API
	// servers (APIServices backed by a Service) and to call admission
	// webhooks backed by a Service, both reached through the Service's
	// EndpointSlices' addresses (nothing here implements cluster IPs).
	Aggregation bool

	// RealNode runs the cluster with one real kubelet node instead of KWOK
	// (see realnode.go); the fields above other than BinDir, WorkDir and
	// CRDDirectoryPaths do not apply. RealNodeMissing says whether this
	// machine can.
	RealNode bool
	// NodeBinDir holds containerd, ctr, the runc shim, kube-router and
	// CoreDNS (which runs as a pod of an image built from it); default
	// $WARMROUTE_NODE_ASSETS, else hack/build-node.sh's cache (see
	// NodeBinDir).
	NodeBinDir string
	// Images are docker-save archives loaded into the node's containerd
	// before the kubelet starts (Cluster.LoadImages loads more later).
	Images []string
	// Log receives the real node's startup phases with their elapsed time;
	// default os.Stderr.
	Log io.Writer
}

// Full is the option set for a cluster that runs Deployments end to end.
func Full() Options {
	return Options{ControllerManager: true, Scheduler: true, KWOK: true}
}

// Cluster is a running local cluster.
type Cluster struct {
	// Config is an admin client config for the API server.
	Config *rest.Config
	// KubeconfigPath is an admin kubeconfig file that kubectl accepts.
	KubeconfigPath string
	// WorkDir holds the kubeconfig, a log per process and state.json.
	WorkDir string

	env          *envtest.Environment
	procs        []*process.Process
	envPIDs      []int
	ownedWorkDir bool
	node         *realNode
}

// State is what `localcluster down` needs to stop a cluster another process
// started; it is written to WorkDir/state.json.
type State struct {
	OwnerPID   int    `json:"ownerPID"`
	Kubeconfig string `json:"kubeconfig"`
	PIDs       []int  `json:"pids"`
}

// Start brings a cluster up and waits until it is usable: the API server
// answers and, with KWOK, every fake node is Ready.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	opts.defaults()
	if opts.BinDir == "" {
		return nil, errors.New("localcluster: no binaries: set Options.BinDir or KUBEBUILDER_ASSETS (run hack/build-controlplane.sh)")
	}
	c = &Cluster{}
	if opts.WorkDir == "" {
		if opts.WorkDir, err = os.MkdirTemp("", "warmroute-cluster-"); err != nil {
			return nil, err
		}
		c.ownedWorkDir = true
	} else if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	c.WorkDir = opts.WorkDir
	// Stop what started when a step fails; each failure returns a nil
	// Cluster, so the deferred call keeps its own reference.
	started := c
	defer func() {
		if err != nil {
			_ = started.Stop()
		}
	}()

	if opts.RealNode {
		if opts.NodeBinDir == "" {
			if opts.NodeBinDir, err = NodeBinDir(); err != nil {
				return nil, err
			}
		}
		if err := c.startRealNode(ctx, opts); err != nil {
			return nil, err
		}
		if err := c.installCRDs(opts.CRDDirectoryPaths); err != nil {
			return nil, err
		}
		return c, c.writeState()
	}

	c.env = &envtest.Environment{
		BinaryAssetsDirectory: opts.BinDir,
		CRDDirectoryPaths:     opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing: len(opts.CRDDirectoryPaths) > 0,
	}
	if opts.Aggregation {
		if err := enableAggregation(c.env, c.WorkDir); err != nil {
			return nil, fmt.Errorf("configure the aggregation layer: %w", err)
		}
	}
	before := childPIDs()
	if c.Config, err = c.env.Start(); err != nil {
		return nil, fmt.Errorf("start etcd and kube-apiserver: %w", err)
	}
	c.envPIDs = newChildPIDs(before)
	if err := process.StartReaper(c.envPIDs); err != nil {
		return nil, err
	}

	admin, err := c.env.AddUser(envtest.User{Name: "warmroute-admin", Groups: []string{"system:masters"}}, c.Config)
	if err != nil {
		return nil, fmt.Errorf("create admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig: %w", err)
	}
	c.KubeconfigPath = filepath.Join(c.WorkDir, "kubeconfig")
	if err := os.WriteFile(c.KubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	c.Config = admin.Config()

	if opts.ControllerManager {
		if err := c.run("kube-controller-manager", opts.BinDir, controllerManagerArgs(c.KubeconfigPath)); err != nil {
			return nil, err
		}
	}
	if opts.Scheduler {
		if err := c.run("kube-scheduler", opts.BinDir, schedulerArgs(c.KubeconfigPath)); err != nil {
			return nil, err
		}
	}
	if opts.KWOK {
		if err := c.run("kwok", opts.BinDir, kwokArgs(c.KubeconfigPath, opts)); err != nil {
			return nil, err
		}
		if err := c.createNodes(ctx, opts); err != nil {
			return nil, err
		}
	}
	if err := c.writeState(); err != nil {
		return nil, err
	}
	return c, nil
}

func (o *Options) defaults() {
	if o.BinDir == "" {
		o.BinDir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.GPUsPerNode == 0 {
		o.GPUsPerNode = 8
	}
	if o.PodCIDR == "" {
		o.PodCIDR = "127.1.0.1/16"
	}
	if o.NodeBinDir == "" {
		o.NodeBinDir = os.Getenv("WARMROUTE_NODE_ASSETS")
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
}

func controllerManagerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		// No token controller: envtest's API server admits pods without
		// service account tokens. No node IPAM: KWOK assigns pod IPs itself.
		"--controllers=*,-serviceaccount-token,-nodeipam",
		"--leader-elect=false",
		// Port 0 disables the serving endpoint so that several clusters (one
		// per test package) can run at once.
		"--secure-port=0",
		"--horizontal-pod-autoscaler-sync-period=2s",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
	}
}

func schedulerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}
}

func kwokArgs(kubeconfig string, o Options) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + filepath.Join(o.BinDir, "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--cidr=" + o.PodCIDR,
		"--server-address=127.0.0.1:0",
	}
}

func (c *Cluster) run(name, binDir string, args []string) error {
	return c.startProcess(name, filepath.Join(binDir, name), args)
}

// startProcess starts bin as one of the cluster's processes, logging to
// WorkDir/<name>.log.
func (c *Cluster) startProcess(name, bin string, args []string, env ...string) error {
	p, err := process.Start(name, bin, args, c.WorkDir, env...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	// A bad flag or a missing binary shows up within a moment; say so then
	// instead of timing out later on pods that never run.
	time.Sleep(300 * time.Millisecond)
	if ok, werr := p.Exited(); ok {
		return fmt.Errorf("%s exited at start (%w); see %s", name, werr, filepath.Join(c.WorkDir, name+".log"))
	}
	return nil
}

// NodeName is the name of the i-th fake node.
func NodeName(i int) string { return "gpu-node-" + strconv.Itoa(i) }

func (c *Cluster) createNodes(ctx context.Context, o Options) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for i := range o.Nodes {
		node := fakeNode(NodeName(i), o.GPUsPerNode)
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && countReady(nodes.Items) == o.Nodes, nil
	}); err != nil {
		return fmt.Errorf("fake nodes not Ready within 60s; see %s: %w", filepath.Join(c.WorkDir, "kwok.log"), err)
	}
	return nil
}

func fakeNode(name string, gpus int) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{fakeNodeAnnotation: "fake"},
			Labels: map[string]string{
				"type":                        "kwok",
				"kubernetes.io/hostname":      name,
				"kubernetes.io/os":            "linux",
				"kubernetes.io/arch":          "amd64",
				"topology.kubernetes.io/zone": "local",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

func countReady(nodes []corev1.Node) int {
	n := 0
	for _, node := range nodes {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// PIDs lists every process the cluster started.
func (c *Cluster) PIDs() []int {
	pids := append([]int(nil), c.envPIDs...)
	for _, p := range c.procs {
		pids = append(pids, p.Pid())
	}
	return pids
}

func (c *Cluster) writeState() error {
	b, err := json.MarshalIndent(State{OwnerPID: os.Getpid(), Kubeconfig: c.KubeconfigPath, PIDs: c.PIDs()}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.WorkDir, "state.json"), b, 0o644)
}

// Stop ends every process the cluster started, in reverse order, and waits
// until each is gone. It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	// A real node's components need no graceful stop: everything of it
	// is killed at once and its namespaces go with it.
	if c.node != nil {
		if err := c.node.stop(); err != nil {
			errs = append(errs, err)
		}
		c.node = nil
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].Stop(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.procs = nil
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop etcd and kube-apiserver: %w", err))
		}
		c.env = nil
	}
	// envtest stops its processes gently; make sure, since a leftover API
	// server would hold its port and etcd its data directory.
	for _, pid := range c.envPIDs {
		killAndWait(pid)
	}
	if c.WorkDir != "" {
		_ = os.Remove(filepath.Join(c.WorkDir, "state.json"))
		if c.ownedWorkDir {
			_ = os.RemoveAll(c.WorkDir)
		}
	}
	return errors.Join(errs...)
}

// StopFromState stops the cluster described by a state file written by
// another process (`localcluster down`).
func StopFromState(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	// The owner stops its cluster cleanly on SIGTERM; then make sure.
	if s.OwnerPID > 0 && s.OwnerPID != os.Getpid() && process.Alive(s.OwnerPID) {
		process.KillAndWait(s.OwnerPID, 15*time.Second)
	}
	for _, pid := range s.PIDs {
		killAndWait(pid)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func killAndWait(pid int) { process.KillAndWait(pid, 5*time.Second) }

func childPIDs() map[int]bool {
	out := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	me := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(me) {
			out[pid] = true
		}
	}
	return out
}

func newChildPIDs(before map[int]bool) []int {
	var pids []int
	for pid := range childPIDs() {
		if !before[pid] {
			pids = append(pids, pid)
		}
	}
	return pids
}
