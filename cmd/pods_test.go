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

package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/warmroute/warmroute/controllers"
)

func TestPodFlags(t *testing.T) {
	for _, tt := range []struct {
		name      string
		args      []string
		scraping  bool
		want      controllers.PodIdentity
		scraperNS string // empty: no scraper admitted
		wantErr   string
	}{
		{name: "kubernetes", args: []string{"--platform=kubernetes"}, want: controllers.DefaultVLLMIdentity(false)},
		{name: "openshift fixes nothing", args: []string{"--platform=openshift"}, want: controllers.PodIdentity{}},
		{name: "flags win", args: []string{"--platform=openshift", "--vllm-run-as-user=1001", "--vllm-fs-group=0"},
			want: controllers.PodIdentity{RunAsUser: ptr.To[int64](1001), FSGroup: ptr.To[int64](0)}},
		{name: "scraper", args: []string{"--platform=kubernetes", "--operator-namespace=ops"}, scraping: true,
			want: controllers.DefaultVLLMIdentity(false), scraperNS: "ops"},
		{name: "no custom metrics API, no scraper", args: []string{"--platform=kubernetes", "--operator-namespace=ops"},
			want: controllers.DefaultVLLMIdentity(false)},
		{name: "bad labels", args: []string{"--platform=kubernetes", "--operator-namespace=ops", "--operator-pod-labels=a b"}, scraping: true, wantErr: "--operator-pod-labels"},
		{name: "bad platform", args: []string{"--platform=eks"}, wantErr: "--platform"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var f podFlags
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			f.bind(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			var opts controllers.Options
			err := f.apply(nil, &opts, tt.scraping)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := idString(opts.VLLM), idString(tt.want); got != want {
				t.Errorf("identity %s, want %s", got, want)
			}
			switch s := opts.MetricsScraper; {
			case tt.scraperNS == "" && s != nil:
				t.Errorf("scraper admitted: %+v", s)
			case tt.scraperNS != "" && (s == nil || s.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != tt.scraperNS):
				t.Errorf("scraper %+v, want namespace %s", s, tt.scraperNS)
			}
		})
	}
}

func idString(id controllers.PodIdentity) string {
	return ptrString(id.RunAsUser) + "/" + ptrString(id.RunAsGroup) + "/" + ptrString(id.FSGroup)
}

// The default --operator-pod-labels select the manager's pods as
// config/manager (and so the Helm chart and the bundle) labels them.
func TestManagerPodLabelsSelectTheManager(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := labels.Parse(managerPodLabels)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("no Deployment in config/manager/manager.yaml: %v", err)
		}
		if d.Kind == "Deployment" {
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("%q does not select the manager's pod labels %v", managerPodLabels, d.Spec.Template.Labels)
			}
			return
		}
	}
}
