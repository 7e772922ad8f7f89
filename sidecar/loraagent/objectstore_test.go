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

package loraagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/test/objectstore"
	"github.com/warmroute/warmroute/test/vllmsim"
)

// TestAgentLoadsFromObjectStore runs the agent against an S3-protocol
// server on loopback and the simulator: an s3:// adapter is downloaded
// with the credentials of its Secret into the download directory, loaded
// from there and its download removed on unload; wrong credentials, an
// empty prefix and an unreadable Secret are failures with the store's
// reason.
func TestAgentLoadsFromObjectStore(t *testing.T) {
	ctx := context.Background()
	store, err := objectstore.Start("tenant-key")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	files := map[string]string{
		"adapter_config.json":             `{"r": 8, "lora_alpha": 16}`,
		"adapter_model.safetensors":       "weights",
		"checkpoint/optimizer-state.json": "{}",
	}
	for name, data := range files {
		if err := store.Put("adapters", "tenants/acme/"+name, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Put("adapters", "tenants/acme-other/adapter_config.json", []byte("not acme's")); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]map[string][]byte{
		"s3-creds": {"AWS_ACCESS_KEY_ID": []byte("tenant-key"), "AWS_SECRET_ACCESS_KEY": []byte("s3cr3t")},
		"wrong":    {"AWS_ACCESS_KEY_ID": []byte("someone-else"), "AWS_SECRET_ACCESS_KEY": []byte("x")},
	}
	dir := t.TempDir()
	var st routing.LoRAState
	var loadedFrom []string
	a := &Agent{
		Instance: "pod-a",
		VLLM: startSim(t, vllmsim.Config{MaxLoRAs: 4, LoRAPathExists: func(p string) bool {
			loadedFrom = append(loadedFrom, p)
			_, err := os.Stat(filepath.Join(p, "adapter_config.json"))
			return err == nil
		}}),
		Report: func(_ context.Context, s routing.LoRAState) error { st = s; return nil },
		ObjectStore: &ObjectStore{Dir: dir, Secret: func(_ context.Context, name string) (map[string][]byte, error) {
			if d, ok := secrets[name]; ok {
				return d, nil
			}
			return nil, errors.New(`secrets "` + name + `" is forbidden`)
		}},
		Log: logr.Discard(),
	}
	s3 := func(name, uri, secret string, desired ...string) routing.Adapter {
		return routing.Adapter{Name: name, URI: uri, S3: &routing.S3Source{Endpoint: store.URL, CredentialsSecret: secret}, Desired: desired}
	}
	_ = a.Apply(doc(
		s3("acme", "s3://adapters/tenants/acme", "s3-creds", "pod-a"),
		s3("denied", "s3://adapters/tenants/acme", "wrong", "pod-a"),
		s3("empty", "s3://adapters/tenants/nobody", "s3-creds", "pod-a"),
		s3("unreadable", "s3://adapters/tenants/acme", "not-granted", "pod-a"),
	))
	a.Sync(ctx, time.Now())

	if !slices.Equal(st.Loaded, []string{"acme"}) {
		t.Fatalf("loaded %v, want [acme]; failed %+v", st.Loaded, st.Failed)
	}
	if want := filepath.Join(dir, "acme"); !slices.Contains(loadedFrom, want) {
		t.Errorf("vLLM was given %v, want %s", loadedFrom, want)
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(dir, "acme", name))
		if err != nil || string(got) != data {
			t.Errorf("%s: %q, %v; want %q", name, got, err, data)
		}
	}
	reasons := map[string]string{}
	for _, f := range st.Failed {
		reasons[f.Name] = f.Reason
	}
	for name, want := range map[string]string{
		"denied":     "Access Denied",
		"empty":      "fetch s3://adapters/tenants/nobody: no objects under the prefix",
		"unreadable": `credentials: secrets "not-granted" is forbidden`,
	} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s failed with %q, want it to say %q", name, reasons[name], want)
		}
	}

	// Moved away, the adapter is unloaded and its download removed.
	_ = a.Apply(doc(s3("acme", "s3://adapters/tenants/acme", "s3-creds", "pod-b")))
	a.Sync(ctx, time.Now())
	if len(st.Loaded) != 0 {
		t.Fatalf("after the move: %+v", st)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("download directory keeps %v after the unload", entries)
	}
}
