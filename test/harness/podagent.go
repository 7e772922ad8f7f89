// Package harness assembles a warmroute deployment on the local cluster for
// the end-to-end tests, the demo and the benchmark: the operator as a
// process, a pod agent that turns each Running vLLM pod into a simulated
// vLLM server on the pod's own loopback IP, and the router as a process fed
// from the routing ConfigMap the way kubelet would feed it.
package harness

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Backend is what the pod agent runs for one pod.
type Backend interface {
	// Terminate is SIGTERM: the backend stops as its process would, and
	// Terminate returns once it has.
	Terminate()
	// Kill stops it at once, dropping connections (the process crashed,
	// or the kubelet's SIGKILL at the end of the grace period).
	Kill()
}

// BackendFactory starts a backend for pod listening on addr (podIP:port).
type BackendFactory func(pod *corev1.Pod, addr string) (Backend, error)

// PodAgent plays the kubelet and the container runtime for one container
// of the pods KWOK runs: it starts a backend when a selected pod is Running
// with an IP, and stops it the way the kubelet stops a container. When the
// pod starts terminating, the container's preStop sleep runs (the backend
// keeps serving), then the backend gets SIGTERM (Terminate), and if it has
// not stopped when the grace period ends (the pod's deletionTimestamp) it
// is killed. KWOK removes the pod object at some point within the grace
// period; that does not cut the sequence short, as a real kubelet's would
// not be.
type PodAgent struct {
	client    kubernetes.Interface
	namespace string
	selector  string
	container string
	port      int
	factory   BackendFactory

	mu       sync.Mutex
	backends map[string]*podBackend // by pod name
	killed   map[string]bool        // pods whose backend a test killed
	errs     []error
}

type podBackend struct {
	uid         string
	addr        string
	backend     Backend
	terminating bool
}

// NewPodAgent watches pods in namespace matching selector and serves each
// on podIP:port, as the pod's container named container (whose preStop
// hook it runs).
func NewPodAgent(client kubernetes.Interface, namespace, selector, container string, port int, factory BackendFactory) *PodAgent {
	return &PodAgent{
		client: client, namespace: namespace, selector: selector, container: container, port: port, factory: factory,
		backends: map[string]*podBackend{}, killed: map[string]bool{},
	}
}

// Run watches until ctx ends, then closes every backend.
func (a *PodAgent) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithNamespace(a.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = a.selector }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.sync(obj) },
		UpdateFunc: func(_, obj any) { a.sync(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				a.remove(pod.Name, string(pod.UID))
			}
		},
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, b := range a.backends {
		b.backend.Kill() // the test is over
		delete(a.backends, name)
	}
	return nil
}

func (a *PodAgent) sync(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		if b, ok := a.backends[pod.Name]; ok && b.uid == string(pod.UID) {
			a.terminateLocked(pod.Name, b, a.preStop(pod), time.Until(pod.DeletionTimestamp.Time))
		}
		return
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return
	}
	if b, ok := a.backends[pod.Name]; ok {
		if b.uid == string(pod.UID) {
			return
		}
		b.backend.Kill() // same name, new pod (StatefulSet-like reuse)
		delete(a.backends, pod.Name)
	}
	if a.killed[pod.Name] {
		return
	}
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(a.port))
	// The cluster gave this pod an IP that a terminating pod's backend
	// may still hold (KWOK frees a pod's IP when the pod object goes,
	// without waiting for our backend's preStop and drain): on a node the
	// old sandbox is gone before its IP is reused, so the old backend must
	// not answer for the new pod (it serves another model, other mounts).
	for other, b := range a.backends {
		if b.addr == addr && other != pod.Name {
			b.backend.Kill()
			delete(a.backends, other)
		}
	}
	backend, err := a.factory(pod, addr)
	if err != nil {
		a.errs = append(a.errs, fmt.Errorf("start backend for pod %s at %s: %w", pod.Name, addr, err))
		return
	}
	a.backends[pod.Name] = &podBackend{uid: string(pod.UID), addr: addr, backend: backend}
}

// remove handles a pod object's removal. A backend already terminating
// goes on with its sequence; one whose pod vanished without being seen
// terminating (a forced deletion) is killed.
func (a *PodAgent) remove(name, uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.killed, name)
	if b, ok := a.backends[name]; ok && b.uid == uid && !b.terminating {
		a.terminateLocked(name, b, 0, 0)
	}
}

// preStop is the preStop sleep of the agent's container in pod.
func (a *PodAgent) preStop(pod *corev1.Pod) time.Duration {
	for _, c := range pod.Spec.Containers {
		if c.Name == a.container && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			return time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	return 0
}

// terminateLocked runs the kubelet's stop sequence for a backend once:
// preStop, SIGTERM, and SIGKILL when grace runs out first.
func (a *PodAgent) terminateLocked(name string, b *podBackend, preStop, grace time.Duration) {
	if b.terminating {
		return
	}
	b.terminating = true
	go func() {
		deadline := time.NewTimer(max(grace, 0))
		defer deadline.Stop()
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			if grace <= 0 {
				return
			}
			t := time.NewTimer(preStop)
			select {
			case <-t.C:
				b.backend.Terminate()
			case <-deadline.C:
				t.Stop()
				b.backend.Kill()
			}
		}()
		select {
		case <-stopped:
		case <-deadline.C:
		}
		b.backend.Kill() // a no-op for a backend that stopped
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.backends[name] == b {
			delete(a.backends, name)
		}
	}()
}

// Backends returns the running backends by pod name.
func (a *PodAgent) Backends() map[string]Backend {
	return byPod(a, func(b *podBackend) Backend { return b.backend })
}

// Addresses returns the backends' addresses by pod name.
func (a *PodAgent) Addresses() map[string]string {
	return byPod(a, func(b *podBackend) string { return b.addr })
}

// byPod returns a copy, taken under the lock, of one field of each running
// backend by pod name.
func byPod[V any](a *PodAgent, field func(*podBackend) V) map[string]V {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]V, len(a.backends))
	for name, b := range a.backends {
		out[name] = field(b)
	}
	return out
}

// Kill stops a pod's backend abruptly and keeps it down (the pod object stays,
// as when a process crashes) until Revive.
func (a *PodAgent) Kill(podName string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.backends[podName]
	if !ok {
		return fmt.Errorf("no backend for pod %s", podName)
	}
	b.backend.Kill()
	delete(a.backends, podName)
	a.killed[podName] = true
	return nil
}

// Revive starts a killed pod's backend again.
func (a *PodAgent) Revive(ctx context.Context, podName string) error {
	a.mu.Lock()
	delete(a.killed, podName)
	a.mu.Unlock()
	pod, err := a.client.CoreV1().Pods(a.namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	a.sync(pod)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.backends[podName]; !ok {
		return fmt.Errorf("backend for pod %s did not start: %v", podName, a.errs)
	}
	return nil
}

// Errors returns the backend start failures seen so far.
func (a *PodAgent) Errors() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}
