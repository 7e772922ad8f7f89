package harness

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/warmroute/warmroute/sidecar/loraagent"
	"github.com/warmroute/warmroute/sidecar/router/config"
)

// loraAgentContainer is the sidecar the operator adds to vLLM pods of
// endpoints with LoRA.
const loraAgentContainer = "lora-agent"

// StartLoRAAgents plays the LoRA agent sidecar, which the pod agent does
// not run: for every vLLM pod that has one, it runs the agent's code in this
// process, pointed at the pod's simulator and at the routing ConfigMap its
// pod mounts (read through the API), reporting on the pod as the sidecar
// does, with the sidecar's identity: a token of the pod's ServiceAccount
// bound to the pod, as the kubelet projects it, so that the operator's
// Role for the agent and config/admission's policy apply to every call.
// The agents stop with ctx.
func (e *Env) StartLoRAAgents(ctx context.Context) *PodAgent {
	a := NewPodAgent(e.Kube, e.opts.Namespace, VLLMSelector, loraAgentContainer, vllmPort, func(pod *corev1.Pod, addr string) (Backend, error) {
		configMap := ""
		for _, v := range pod.Spec.Volumes {
			if v.Name == "routing" && v.ConfigMap != nil {
				configMap = v.ConfigMap.Name
			}
		}
		hasAgent := false
		for _, c := range pod.Spec.Containers {
			hasAgent = hasAgent || c.Name == loraAgentContainer
		}
		if !hasAgent || configMap == "" {
			return noBackend{}, nil
		}
		kube, err := e.podIdentity(ctx, pod)
		if err != nil {
			return nil, err
		}
		// The pod's adapter volume: a directory of this process, which
		// the simulator, in this process too, sees as vLLM sees its mount.
		downloads, err := os.MkdirTemp("", "lora-downloads-"+pod.Name+"-")
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithCancel(ctx)
		agent := &loraagent.Agent{
			Instance:    pod.Name,
			VLLM:        "http://" + addr,
			Report:      loraagent.PodAnnotator(kube, pod.Namespace, pod.Name),
			Resync:      2 * time.Second,
			ObjectStore: &loraagent.ObjectStore{Dir: downloads, Secret: loraagent.SecretReader(kube, pod.Namespace)},
			Log:         logr.Discard(),
		}
		loader := &config.Loader{Apply: agent.Apply, Log: logr.Discard()}
		go func() { _ = config.WatchConfigMap(actx, kube, pod.Namespace, configMap, loader) }()
		go func() { _ = agent.Run(actx) }()
		return agentBackend{cancel: cancel, dir: downloads}, nil
	})
	go func() { _ = a.Run(ctx) }()
	return a
}

type agentBackend struct {
	cancel context.CancelFunc
	dir    string
}

// Terminate and Kill stop the agent and drop its adapter volume, as the
// pod's emptyDir goes with the pod.
func (b agentBackend) Terminate() { b.cancel(); _ = os.RemoveAll(b.dir) }
func (b agentBackend) Kill()      { b.Terminate() }

type noBackend struct{}

func (noBackend) Terminate() {}
func (noBackend) Kill()      {}

// podIdentity is a client with the credentials the kubelet gives a pod's
// containers: a token of its ServiceAccount bound to the pod (which the API
// server reports as the authentication.kubernetes.io/pod-name extra).
func (e *Env) podIdentity(ctx context.Context, pod *corev1.Pod) (kubernetes.Interface, error) {
	tr, err := e.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for pod %s (ServiceAccount %q): %w", pod.Name, pod.Spec.ServiceAccountName, err)
	}
	cfg := rest.AnonymousClientConfig(e.Cluster.Config)
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfig(cfg)
}
