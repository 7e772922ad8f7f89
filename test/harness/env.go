package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
	"github.com/warmroute/warmroute/test/freeport"
	"github.com/warmroute/warmroute/test/localcluster"
	"github.com/warmroute/warmroute/test/process"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// VLLMSelector selects the vLLM pods the operator creates.
const VLLMSelector = "serving.warmroute.dev/role=vllm"

// vllmPort is the port vLLM listens on in its pod.
const vllmPort = 8000

// Options configure an Env.
type Options struct {
	// RepoRoot is the checkout (default: found from the working directory).
	RepoRoot string
	// WorkDir holds binaries, logs and the kubeconfig (default: a temp dir).
	WorkDir string
	// Namespace is where the pod agent serves vLLM pods (default "default").
	Namespace string
	// PodCIDR for the cluster; suites running at once need distinct ones.
	PodCIDR string
	// Nodes and GPUsPerNode size the fake fleet (defaults 2 × 8).
	Nodes, GPUsPerNode int
	// Sim is the template for every simulated vLLM server.
	Sim vllmsim.Config
	// Progress, when set, is told what is happening (the demo prints it).
	Progress func(string)
	// CustomMetrics runs the operator's custom metrics API behind the API
	// server's aggregation layer, so that HorizontalPodAutoscalers can
	// scale endpoints on it.
	CustomMetrics bool
}

// Env is a local cluster with the operator running and a simulator behind
// every vLLM pod.
type Env struct {
	Cluster  *localcluster.Cluster
	Client   client.Client
	Kube     kubernetes.Interface
	Bin      Binaries
	Operator *process.Process
	Agent    *PodAgent
	Sims     *SimRegistry
	WorkDir  string
	opts     Options
	binDir   string // the control plane's binaries
	cancel   context.CancelFunc
	routers  []*Router
	// OperatorMetricsURL is the operator's own metrics endpoint (HTTPS,
	// for callers allowed get on /metrics, with a self-signed certificate).
	OperatorMetricsURL string
	// operatorUser is the operator's user name (its ServiceAccount's) and
	// deniedFrom how far OperatorDenials has read its log.
	operatorUser string
	deniedFrom   int64
}

// Start builds the binaries, starts the cluster (with the CRDs), the
// operator and the pod agent.
func Start(ctx context.Context, o Options) (e *Env, err error) {
	if o.RepoRoot == "" {
		if o.RepoRoot, err = localcluster.RepoRoot(); err != nil {
			return nil, err
		}
	}
	if o.WorkDir == "" {
		if o.WorkDir, err = os.MkdirTemp("", "warmroute-e2e-"); err != nil {
			return nil, err
		}
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	e = &Env{WorkDir: o.WorkDir, opts: o, Sims: &SimRegistry{}}
	// A failed start returns a nil Env: stop what was started through
	// this copy.
	started := e
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()

	if e.Bin, err = BuildBinaries(ctx, filepath.Join(o.WorkDir, "bin"), progress); err != nil {
		return nil, err
	}
	progress("building or finding the control plane (the first build takes ~15-20 minutes)")
	bin, err := localcluster.BinDir()
	if err != nil {
		return nil, err
	}
	e.binDir = bin
	progress("starting the local cluster")
	copts := localcluster.Full()
	copts.BinDir, copts.WorkDir, copts.PodCIDR = bin, filepath.Join(o.WorkDir, "cluster"), o.PodCIDR
	copts.Nodes, copts.GPUsPerNode = o.Nodes, o.GPUsPerNode
	copts.CRDDirectoryPaths = []string{filepath.Join(o.RepoRoot, "config", "crd", "bases")}
	// The API server reaches the webhooks and the custom metrics API
	// through their Services' endpoints (see loopbackSlice).
	copts.Aggregation = true
	if e.Cluster, err = localcluster.Start(ctx, copts); err != nil {
		return nil, err
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := servingv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := inferencepool.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if e.Client, err = client.New(e.Cluster.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if e.Kube, err = kubernetes.NewForConfig(e.Cluster.Config); err != nil {
		return nil, err
	}

	progress("installing config/default and config/admission (webhooks, RBAC, the operator's ServiceAccount)")
	inst, err := renderInstall(o.RepoRoot, filepath.Join(o.WorkDir, "certs"), o.CustomMetrics)
	if err != nil {
		return nil, err
	}
	if err := inst.apply(ctx, e.Client, inst.objects); err != nil {
		return nil, err
	}
	e.operatorUser = "system:serviceaccount:" + inst.namespace + ":" + inst.serviceAccount
	kubeconfig, err := inst.operatorKubeconfig(ctx, e)
	if err != nil {
		return nil, err
	}

	progress("starting the operator as ServiceAccount " + inst.namespace + "/" + inst.serviceAccount)
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := inst.operatorArgs(kubeconfig, probe)
	e.OperatorMetricsURL = "https://127.0.0.1:" + strconv.Itoa(inst.ports[metricsPortName]) + "/metrics"
	if o.CustomMetrics {
		args = append(args, inst.customMetricsArgs()...)
	}
	if e.Operator, err = process.Start("operator", e.Bin.Operator, args, e.Cluster.WorkDir); err != nil {
		return nil, err
	}
	operatorLog := filepath.Join(e.Cluster.WorkDir, "operator.log")
	// /readyz includes the webhook server's.
	if err := waitStarted(ctx, e.Operator, operatorLog, "http://"+probe+"/readyz", 60*time.Second); err != nil {
		return nil, fmt.Errorf("operator not ready: %w", err)
	}
	if o.CustomMetrics {
		progress("registering the operator's custom metrics API")
		if err := inst.apply(ctx, e.Client, inst.apiServices); err != nil {
			return nil, err
		}
		if err := waitCustomMetrics(ctx, e); err != nil {
			return nil, err
		}
	}
	progress("waiting for the admission webhooks to answer the API server")
	if err := waitWebhooks(ctx, e.Client, o.Namespace); err != nil {
		return nil, fmt.Errorf("%w (operator log: %s)", err, operatorLog)
	}

	agentCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.Agent = NewPodAgent(e.Kube, o.Namespace, VLLMSelector, vllmContainer, vllmPort, SimFactory(o.Sim, e.Sims))
	go func() { _ = e.Agent.Run(agentCtx) }()
	return e, nil
}

// Stop stops routers, the pod agent, the operator and the cluster.
func (e *Env) Stop() {
	for _, r := range e.routers {
		r.Stop()
	}
	if e.cancel != nil {
		e.cancel()
	}
	if e.Operator != nil {
		_ = e.Operator.Stop(10 * time.Second)
	}
	if e.Cluster != nil {
		_ = e.Cluster.Stop()
	}
}

// LogDir is where every process logs.
func (e *Env) LogDir() string { return e.Cluster.WorkDir }

// freeAddr is a loopback address for a process the harness may restart
// on it (see freeport).
func freeAddr() (string, error) {
	a, err := freeport.Loopback(1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}

// waitHTTP polls url until it answers 200.
func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	return waitHTTPUnless(ctx, url, timeout, func() error { return nil })
}

// waitHTTPUnless polls url until it answers 200, or stop returns an error.
func waitHTTPUnless(ctx context.Context, url string, timeout time.Duration, stop func() error) error {
	last := errors.New("no answer")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = httpOK(ctx, url)
		if last == nil {
			return true, nil
		}
		return false, stop()
	}); err != nil {
		return fmt.Errorf("%w (last: %w)", err, last)
	}
	return nil
}

// waitStarted polls url until it answers 200, as waitHTTP does, but gives
// up as soon as the process exits, and quotes the end of its log either way:
// a router that refuses its flags or a key file exits at once, and the CI
// summary then says why instead of naming a log file on another machine
// after a 30 s wait.
func waitStarted(ctx context.Context, p *process.Process, logPath, url string, timeout time.Duration) error {
	exited := errors.New("the process exited")
	err := waitHTTPUnless(ctx, url, timeout, func() error {
		if done, _ := p.Exited(); done {
			return exited
		}
		return nil
	})
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w; %s ends:\n%s", err, logPath, logTail(logPath, 2048))
}

// logTail is the last n bytes of the file at path (from a line start), or
// why it could not be read. It runs only when a start failed, on a test
// process's log.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// httpOK asks url once and says why it did not answer 200.
func httpOK(ctx context.Context, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
