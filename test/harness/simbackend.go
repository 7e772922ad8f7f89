package harness

import (
	"context"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// simBackend is a simulated vLLM server standing in for a pod's container.
type simBackend struct{ srv *vllmsim.Server }

func (b simBackend) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return b.srv.Shutdown(ctx)
}

func (b simBackend) Kill() { _ = b.srv.Close() }

// SimFactory starts a simulator for a vLLM pod with the pod's own served
// model name and adapter limit (read from the container's `vllm serve`
// flags), configured otherwise by template.
func SimFactory(template vllmsim.Config, sims *SimRegistry) BackendFactory {
	return func(pod *corev1.Pod, addr string) (Backend, error) {
		cfg := template
		cfg.Listen = addr
		cfg.InstanceID = pod.Name
		for _, c := range pod.Spec.Containers {
			for _, a := range c.Args {
				switch {
				case strings.HasPrefix(a, "--served-model-name="):
					cfg.Model = strings.TrimPrefix(a, "--served-model-name=")
				case strings.HasPrefix(a, "--max-loras="):
					if n, err := strconv.Atoi(strings.TrimPrefix(a, "--max-loras=")); err == nil {
						cfg.MaxLoRAs = n
					}
				}
			}
		}
		srv, err := vllmsim.Start(cfg)
		if err != nil {
			return nil, err
		}
		sims.add(pod.Name, srv)
		return simBackend{srv}, nil
	}
}
