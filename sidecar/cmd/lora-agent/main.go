/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command lora-agent runs beside vLLM in each pod of an LLMEndpoint with
// LoRA adapters. It reads the routing document (the mounted ConfigMap, and
// the ConfigMap through the API when --configmap is set, which is faster),
// loads and unloads this pod's adapters through vLLM's runtime API, and
// reports what is loaded in an annotation on its pod for the operator.
// Adapters in object storage it first downloads into --download-dir (by
// default the adapter volume's path), a volume vLLM mounts too, with
// credentials from the Secret they name.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/loraagent"
	"github.com/warmroute/warmroute/sidecar/router/config"
)

func main() {
	fs := flag.NewFlagSet("lora-agent", flag.ExitOnError) // -help exits 0, a bad flag 2
	configDir := fs.String("config-dir", "/etc/warmroute/routing", "directory of the mounted routing ConfigMap")
	configMap := fs.String("configmap", "", "namespace/name of the routing ConfigMap to watch through the API (optional)")
	vllmURL := fs.String("vllm-url", "http://127.0.0.1:8000", "base URL of the pod's vLLM server")
	downloadDir := fs.String("download-dir", v1alpha1.AdapterDownloadRoot, "directory, shared with vLLM, to download adapters from object storage into; where it does not exist, such adapters fail to load")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	poll := fs.Duration("poll", 10*time.Second, "how often to re-read the mounted document")
	resync := fs.Duration("resync", 10*time.Second, "how often to re-read vLLM's adapters")
	verbosity := fs.Int("v", 0, "log verbosity")
	_ = fs.Parse(os.Args[1:]) // exits on an error
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{Verbosity: *verbosity, LogTimestamp: true})
	pod, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if pod == "" || namespace == "" {
		log.Error(nil, "POD_NAME and POD_NAMESPACE must be set (downward API)")
		os.Exit(2)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		log.Error(err, "kubernetes client config")
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error(err, "kubernetes client")
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	agent := &loraagent.Agent{
		Instance: pod,
		VLLM:     *vllmURL,
		// vLLM's own variable: the operator copies vLLM's entry, and a
		// Secret reference works only through the environment.
		APIKey: os.Getenv("VLLM_API_KEY"),
		Report: loraagent.PodAnnotator(client, namespace, pod),
		Resync: *resync,
		Log:    log.WithName("agent"),
	}
	if fi, err := os.Stat(*downloadDir); err == nil && fi.IsDir() {
		agent.ObjectStore = &loraagent.ObjectStore{Dir: *downloadDir, Secret: loraagent.SecretReader(client, namespace)}
	}
	loader := &config.Loader{Apply: agent.Apply, Log: log.WithName("config")}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := config.WatchFile(ctx, filepath.Join(*configDir, routing.ConfigMapKey), *poll, loader); err != nil {
			log.Error(err, "routing document watch stopped")
		}
	})
	if *configMap != "" {
		ns, name, err := config.ParseConfigMapRef(*configMap)
		if err != nil {
			log.Error(err, "--configmap")
			os.Exit(2)
		}
		wg.Go(func() {
			if err := config.WatchConfigMap(ctx, client, ns, name, loader); err != nil {
				log.Error(err, "routing ConfigMap watch stopped")
			}
		})
	}
	wg.Go(func() { _ = agent.Run(ctx) })
	wg.Wait()
}
