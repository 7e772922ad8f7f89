package harness

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/test/process"
)

// Router is a router process fed from an endpoint's routing ConfigMap: the
// ConfigMap is projected into a directory as kubelet would (the router's
// --config-dir) and also named with --configmap, as in a real pod.
type Router struct {
	// URL is the traffic address, MetricsURL the metrics/health address.
	URL, MetricsURL string
	// PickAddr is the pick API's address (host:port), for a router pod
	// the operator renders with --pick-listen.
	PickAddr string
	// EPPAddr is the Endpoint Picker Protocol's address (host:port), for
	// a router pod rendered with --epp-listen (mode InferencePool); URL is
	// then empty when the pod runs the picker only.
	EPPAddr   string
	Proc      *process.Process
	ConfigDir string
	name      string
	args      []string
	env       []string // VAR=value, for a router pod's environment
	logDir    string
	bin       string
}

// RoutingConfigMapName is the routing ConfigMap of an endpoint.
func RoutingConfigMapName(endpoint string) string { return endpoint + "-routing" }

// StartRouter starts a router for the named LLMEndpoint; extra are further
// router flags.
func (e *Env) StartRouter(ctx context.Context, endpoint string, extra ...string) (*Router, error) {
	cm := RoutingConfigMapName(endpoint)
	dir := filepath.Join(e.WorkDir, "routing", fmt.Sprintf("%s-%d", endpoint, len(e.routers)))
	if err := MirrorConfigMap(ctx, e.Kube, e.opts.Namespace, cm, dir); err != nil {
		return nil, err
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	saltKey, err := e.sharedSaltKey()
	if err != nil {
		return nil, err
	}
	r := &Router{
		URL: "http://" + listen, MetricsURL: "http://" + metrics, ConfigDir: dir,
		name: fmt.Sprintf("router-%s-%d", endpoint, len(e.routers)), logDir: e.LogDir(), bin: e.Bin.Router,
		args: append(append([]string{
			"--config-dir=" + dir,
			"--configmap=" + e.opts.Namespace + "/" + cm,
			"--listen=" + listen,
			"--metrics-listen=" + metrics,
			// Routers started alone share one key, as the replicas of a
			// router Deployment share their endpoint's Secret: without
			// it, each would salt a tenant differently.
			"--cache-salt-key-file=" + saltKey,
		}, e.localRouterFlags()...), extra...),
	}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	e.routers = append(e.routers, r)
	return r, nil
}

// sharedSaltKey is the cache salt key file of the routers StartRouter
// starts, written once per Env in a kubelet-style directory.
func (e *Env) sharedSaltKey() (string, error) {
	dir := filepath.Join(e.WorkDir, "cache-salt")
	path := filepath.Join(dir, "key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := projectVolume(dir, map[string]string{"key": string(key)}); err != nil {
		return "", fmt.Errorf("write cache salt key: %w", err)
	}
	return path, nil
}

// localRouterFlags are the flags every router the harness runs gets, after
// its own and before the caller's extra ones (which win).
func (e *Env) localRouterFlags() []string {
	return []string{
		"--kubeconfig=" + e.Cluster.KubeconfigPath,
		// Short, so that tests see health changes and stops quickly.
		"--health-interval=500ms",
		"--shutdown-timeout=10s",
		"--drain-delay=1s",
		// Simulated pods listen on loopback IPs (127.x).
		"--allow-loopback-backends",
	}
}

// launch starts the router process without waiting for it.
func (r *Router) launch() error {
	p, err := process.Start(r.name, r.bin, r.args, r.logDir, r.env...)
	if err != nil {
		return err
	}
	r.Proc = p
	return nil
}

func (r *Router) start(ctx context.Context) error {
	if err := r.launch(); err != nil {
		return err
	}
	if err := waitStarted(ctx, r.Proc, filepath.Join(r.logDir, r.name+".log"), r.MetricsURL+"/healthz", 30*time.Second); err != nil {
		return fmt.Errorf("router not healthy: %w", err)
	}
	return nil
}

// WaitReady waits until the router has a routing document with instances.
func (r *Router) WaitReady(ctx context.Context, timeout time.Duration) error {
	return waitHTTP(ctx, r.MetricsURL+"/readyz", timeout)
}

// Restart stops the router gracefully and starts it again on the same
// addresses.
func (r *Router) Restart(ctx context.Context) error {
	if err := r.Proc.Stop(15 * time.Second); err != nil {
		return err
	}
	return r.start(ctx)
}

// Stop ends the router gracefully.
func (r *Router) Stop() {
	if r.Proc != nil {
		_ = r.Proc.Stop(15 * time.Second)
	}
}

// RoutingDocument reads an endpoint's routing document from its ConfigMap,
// as the router sees it.
func (e *Env) RoutingDocument(ctx context.Context, endpoint string) (*routingv1alpha1.Document, error) {
	var cm corev1.ConfigMap
	if err := e.Client.Get(ctx, types.NamespacedName{Namespace: e.opts.Namespace, Name: RoutingConfigMapName(endpoint)}, &cm); err != nil {
		return nil, err
	}
	return routingv1alpha1.Decode([]byte(cm.Data[routingv1alpha1.ConfigMapKey]))
}
