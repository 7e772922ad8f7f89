package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// routerContainer is the router's container in the router pods the
// operator renders.
const routerContainer = "router"

// RouterPodSelector selects the router pods of an endpoint.
func RouterPodSelector(endpoint string) string {
	return "serving.warmroute.dev/endpoint=" + endpoint + ",serving.warmroute.dev/role=router"
}

// RouterPods plays the container runtime for an endpoint's router
// Deployment: one router process per Running router pod, listening on the
// pod's own IP on the ports the pod declares, with the arguments and
// environment the operator rendered. The replicas elect their picker with
// the endpoint's Lease through the API server, and the others reach it on
// its pod IP and pick port, as in a cluster. Pods are followed as they come
// and go.
type RouterPods struct {
	agent  *PodAgent
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	ready map[*Router]bool // last readiness probe of each router
}

// StartRouterPods starts following the router pods of endpoint; extra are
// further router flags. Stop ends the routers.
func (e *Env) StartRouterPods(ctx context.Context, endpoint string, extra ...string) (*RouterPods, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &RouterPods{cancel: cancel, done: make(chan struct{}), ready: map[*Router]bool{}}
	// The port is unused: a router pod declares three, read from its spec.
	p.agent = NewPodAgent(e.Kube, e.opts.Namespace, RouterPodSelector(endpoint), "router", 0, func(pod *corev1.Pod, _ string) (Backend, error) {
		r, err := e.routerForPod(ctx, pod, extra)
		if err != nil {
			return nil, err
		}
		return routerBackend{r}, nil
	})
	go func() {
		defer close(p.done)
		_ = p.agent.Run(ctx)
	}()
	go p.probe(ctx)
	return p, nil
}

// routerForPod starts the router of one pod without waiting for it: the
// pod agent starts backends under its lock.
func (e *Env) routerForPod(ctx context.Context, pod *corev1.Pod, extra []string) (*Router, error) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == routerContainer {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, fmt.Errorf("pod %s has no %q container", pod.Name, routerContainer)
	}
	ip := pod.Status.PodIP
	args := make([]string, 0, len(c.Args)+8)
	r := &Router{name: "router-pod-" + pod.Name, logDir: e.LogDir(), bin: e.Bin.Router}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "config-dir":
			// Project the ConfigMap mounted there, as the kubelet does.
			cm, err := mountedConfigMap(pod, c, value)
			if err != nil {
				return nil, err
			}
			dir := filepath.Join(e.WorkDir, "routing", pod.Name)
			if err := MirrorConfigMap(ctx, e.Kube, pod.Namespace, cm, dir); err != nil {
				return nil, err
			}
			r.ConfigDir = dir
			a = "--config-dir=" + dir
		case "listen", "metrics-listen", "pick-listen", "epp-listen":
			if value == "" { // --listen= : the picker only, no proxy
				break
			}
			// ":8080" means every address of the pod: here, its IP.
			host, port, err := net.SplitHostPort(value)
			if err != nil {
				return nil, fmt.Errorf("pod %s: --%s=%s: %w", pod.Name, name, value, err)
			}
			if host == "" {
				host = ip
			}
			addr := net.JoinHostPort(host, port)
			switch name {
			case "listen":
				r.URL = "http://" + addr
			case "metrics-listen":
				r.MetricsURL = "http://" + addr
			case "epp-listen":
				r.EPPAddr = addr
			default:
				r.PickAddr = addr
			}
			a = "--" + name + "=" + addr
		case "cache-salt-key-file", "pick-key-file", "api-keys-dir":
			// Project the Secret mounted there, and wait for it as the
			// kubelet does before it starts the container.
			mountDir, file := value, ""
			if name != "api-keys-dir" {
				mountDir, file = filepath.Dir(value), filepath.Base(value)
			}
			secret, err := mountedSecret(pod, c, mountDir)
			if err != nil {
				return nil, err
			}
			dir := filepath.Join(e.WorkDir, "secrets", pod.Name, secret)
			if err := MirrorSecret(ctx, e.Kube, pod.Namespace, secret, dir); err != nil {
				return nil, err
			}
			if err := waitFile(ctx, filepath.Join(dir, "..data"), 30*time.Second); err != nil {
				return nil, fmt.Errorf("pod %s: Secret %s never appeared: %w", pod.Name, secret, err)
			}
			a = "--" + name + "=" + filepath.Join(dir, file)
		case "drain-delay", "shutdown-timeout":
			// Shortened so that stopping a pod's router fits the tests'
			// patience; the values themselves are tested in the operator.
			continue
		}
		args = append(args, a)
	}
	if (r.URL == "" && r.EPPAddr == "") || r.MetricsURL == "" || r.ConfigDir == "" {
		return nil, fmt.Errorf("pod %s: router args %v lack --listen (or --epp-listen), --metrics-listen or --config-dir", pod.Name, c.Args)
	}
	r.args = append(append(args, e.localRouterFlags()...), extra...)
	env, err := containerEnv(pod, c)
	if err != nil {
		return nil, err
	}
	r.env = env
	if err := r.launch(); err != nil {
		return nil, err
	}
	return r, nil
}

// mountedConfigMap names the ConfigMap volume c mounts at path.
func mountedConfigMap(pod *corev1.Pod, c *corev1.Container, path string) (string, error) {
	return mountedVolume(pod, c, path, "ConfigMap", func(v corev1.Volume) string {
		if v.ConfigMap == nil {
			return ""
		}
		return v.ConfigMap.Name
	})
}

// mountedSecret names the Secret volume c mounts at path.
func mountedSecret(pod *corev1.Pod, c *corev1.Container, path string) (string, error) {
	return mountedVolume(pod, c, path, "Secret", func(v corev1.Volume) string {
		if v.Secret == nil {
			return ""
		}
		return v.Secret.SecretName
	})
}

// mountedVolume names the object of the kind's volume c mounts at path;
// source says a volume's object name, "" when it is of another kind.
func mountedVolume(pod *corev1.Pod, c *corev1.Container, path, kind string, source func(corev1.Volume) string) (string, error) {
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if name := source(v); v.Name == m.Name && name != "" {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("pod %s: no %s volume mounted at %s", pod.Name, kind, path)
}

// waitFile waits until path exists.
func waitFile(ctx context.Context, path string, timeout time.Duration) error {
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("wait for %s: %w", path, err)
	}
	return nil
}

// containerEnv resolves c's environment as the kubelet would, for the
// sources a router pod uses: literal values and the downward API.
func containerEnv(pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	out := make([]string, 0, len(c.Env))
	for _, ev := range c.Env {
		value := ev.Value
		if from := ev.ValueFrom; from != nil {
			if from.FieldRef == nil {
				return nil, fmt.Errorf("pod %s: env %s: only fieldRef sources are played locally", pod.Name, ev.Name)
			}
			switch from.FieldRef.FieldPath {
			case "metadata.name":
				value = pod.Name
			case "metadata.namespace":
				value = pod.Namespace
			case "status.podIP":
				value = pod.Status.PodIP
			default:
				return nil, fmt.Errorf("pod %s: env %s: field %s not played locally", pod.Name, ev.Name, from.FieldRef.FieldPath)
			}
		}
		out = append(out, ev.Name+"="+value)
	}
	return out, nil
}

// routerBackend is a router pod's container.
type routerBackend struct{ r *Router }

func (b routerBackend) Terminate() { b.r.Stop() }
func (b routerBackend) Kill()      { _ = b.r.Proc.Stop(0) }

// Routers returns the running routers, ordered by pod name.
func (p *RouterPods) Routers() []*Router {
	backends := p.agent.Backends()
	names := make([]string, 0, len(backends))
	for name := range backends {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*Router, 0, len(names))
	for _, name := range names {
		if b, ok := backends[name].(routerBackend); ok {
			out = append(out, b.r)
		}
	}
	return out
}

// WaitReady waits until n routers run and each answers /readyz, and
// returns them ordered by pod name.
func (p *RouterPods) WaitReady(ctx context.Context, n int, timeout time.Duration) ([]*Router, error) {
	var rs []*Router
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		rs = p.Routers()
		if len(rs) != n {
			return false, nil
		}
		for _, r := range rs {
			if httpOK(ctx, r.MetricsURL+"/readyz") != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("%d of %d router pods ready after %s (start errors: %v): %w", len(rs), n, timeout, p.agent.Errors(), err)
	}
	return rs, nil
}

// probe polls every router's /readyz as the kubelet's readiness probe does
// (but faster), so that Client sends only to ready routers, as a Service
// sends only to ready endpoints.
func (p *RouterPods) probe(ctx context.Context) {
	client := &http.Client{Timeout: time.Second}
	for ctx.Err() == nil {
		state := map[*Router]bool{}
		for _, r := range p.Routers() {
			resp, err := client.Get(r.MetricsURL + "/readyz")
			state[r] = err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
		}
		p.mu.Lock()
		p.ready = state
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Client returns an HTTP client that plays the router Service: whatever
// host a request names, it goes to a ready router picked at random per
// request.
func (p *RouterPods) Client() *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 256
	return &http.Client{Transport: spreader{p: p, next: base}}
}

type spreader struct {
	p    *RouterPods
	next http.RoundTripper
}

func (s spreader) RoundTrip(req *http.Request) (*http.Response, error) {
	s.p.mu.Lock()
	var ready []*Router
	for r, ok := range s.p.ready {
		if ok {
			ready = append(ready, r)
		}
	}
	s.p.mu.Unlock()
	if len(ready) == 0 {
		return nil, errors.New("no ready router pod")
	}
	r := ready[rand.IntN(len(ready))]
	out := req.Clone(req.Context())
	host := strings.TrimPrefix(r.URL, "http://")
	out.URL.Scheme, out.URL.Host, out.Host = "http", host, host
	return s.next.RoundTrip(out)
}

// Stop ends every router pod's router and stops following the pods.
func (p *RouterPods) Stop() {
	p.cancel()
	<-p.done
}
