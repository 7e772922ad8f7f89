package harness

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// simBackend is a simulated vLLM server standing in for a pod's container.
type simBackend struct{ srv *vllmsim.Server }

func (b simBackend) Terminate() { b.srv.Terminate() }

func (b simBackend) Kill() { _ = b.srv.Close() }

// SimFactory starts a simulator for a vLLM pod with the pod's own served
// model name, adapter limit and shutdown timeout (read from the vllm
// container's `vllm serve` arguments, parsed as the pinned vLLM release
// parses them: an argument that release would refuse fails the pod's start,
// as the real container would crash), and a file system made of the
// container's claim mounts: an adapter path exists when it lies under one.
// It is configured otherwise by template.
func SimFactory(template vllmsim.Config, sims *SimRegistry) BackendFactory {
	cli := vllmsim.PinnedServeCLI()
	return func(pod *corev1.Pod, addr string) (Backend, error) {
		cfg := template
		cfg.Listen = addr
		cfg.InstanceID = pod.Name
		for _, c := range pod.Spec.Containers {
			if c.Name != vllmContainer {
				continue
			}
			if !slices.Equal(c.Command, []string{"vllm", "serve"}) {
				return nil, fmt.Errorf("container %s runs %q, not vllm serve", c.Name, c.Command)
			}
			args, err := cli.Parse(c.Args)
			if err != nil {
				return nil, fmt.Errorf("vLLM %s would exit: %w", cli.Release, err)
			}
			if names := args.Values("--served-model-name"); len(names) > 0 {
				cfg.Model = names[0] // the first is the name vLLM reports
			}
			if v, ok := args.Value("--max-loras"); ok {
				cfg.MaxLoRAs, _ = strconv.Atoi(v) // the parser checked it is an int
			}
			if v, ok := args.Value("--shutdown-timeout"); ok {
				n, _ := strconv.Atoi(v)
				cfg.ShutdownTimeout = time.Duration(n) * time.Second
			}
			if cfg.LoRAPathExists == nil {
				cfg.LoRAPathExists = claimMounts(pod, c)
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

// vllmContainer is the container the simulator stands for.
const vllmContainer = "vllm"

// claimMounts says whether a path exists in container c: a Hugging Face id
// (which the simulator cannot check) does, an absolute path does when it
// lies under a mount of a PersistentVolumeClaim (a claim is taken to hold
// whatever is asked of it) or exists on this host (where the LoRA agents,
// run in this process, download adapters from object storage), and
// nothing else does.
func claimMounts(pod *corev1.Pod, c corev1.Container) func(string) bool {
	claims := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = true
		}
	}
	var roots []string
	for _, m := range c.VolumeMounts {
		if claims[m.Name] {
			roots = append(roots, path.Clean(m.MountPath))
		}
	}
	return func(p string) bool {
		if !path.IsAbs(p) {
			return true
		}
		p = path.Clean(p)
		for _, r := range roots {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		_, err := os.Stat(p)
		return err == nil
	}
}
