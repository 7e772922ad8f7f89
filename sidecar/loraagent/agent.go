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

// Package loraagent keeps one vLLM instance's LoRA adapters true to the
// routing document: it loads, through vLLM's runtime API, the adapters whose
// placement names the instance, unloads those no router sends it any more,
// and reports what is loaded (or failed, and why) to the operator.
package loraagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// Back-off between attempts to load an adapter that failed.
const (
	minBackoff = time.Second
	maxBackoff = 2 * time.Minute
)

// Agent acts for one instance. Apply hands it routing documents (it is a
// config.Loader's Apply); Run does the work.
type Agent struct {
	// Instance is the instance's ID in the routing document (its pod name).
	Instance string
	// VLLM is the base URL of the instance's vLLM server.
	VLLM string
	// Report publishes the state; called only when it changed (and again
	// after a failed call).
	Report func(context.Context, routing.LoRAState) error
	// Resync is how often the agent re-reads vLLM's adapters even when no
	// document arrives, which catches a restarted vLLM. Defaults to 10s.
	Resync time.Duration
	// APIKey is vLLM's API key (its --api-key or VLLM_API_KEY), sent as a
	// bearer token: vLLM guards /v1, where the models list and the adapter
	// loading live, with it. Empty sends none.
	APIKey string
	// ObjectStore downloads adapters from S3 before vLLM loads them; nil:
	// such adapters fail to load, saying why.
	ObjectStore *ObjectStore
	Log         logr.Logger

	mu   sync.Mutex
	doc  *routing.Document
	wake chan struct{}

	retries  map[string]retry
	reported *routing.LoRAState
}

type retry struct {
	at     time.Time
	delay  time.Duration
	reason string
}

// Apply takes a new routing document.
func (a *Agent) Apply(doc *routing.Document) error {
	a.mu.Lock()
	a.doc = doc
	a.mu.Unlock()
	select {
	case a.wakeChan() <- struct{}{}:
	default:
	}
	return nil
}

func (a *Agent) wakeChan() chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wake == nil {
		a.wake = make(chan struct{}, 1)
	}
	return a.wake
}

// Run syncs on every document, every retry and every resync period until
// ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	resync := a.Resync
	if resync <= 0 {
		resync = 10 * time.Second
	}
	wake := a.wakeChan()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-timer.C:
		}
		next := min(a.Sync(ctx, time.Now()), resync)
		timer.Reset(next)
	}
}

// Sync makes one pass and returns when the next retry is due.
func (a *Agent) Sync(ctx context.Context, now time.Time) time.Duration {
	a.mu.Lock()
	doc := a.doc
	a.mu.Unlock()
	if doc == nil {
		return time.Hour
	}
	if a.retries == nil {
		a.retries = map[string]retry{}
	}
	want := map[string]routing.Adapter{}
	keep := map[string]bool{}
	for _, ad := range doc.Adapters {
		if slices.Contains(ad.Desired, a.Instance) {
			want[ad.Name], keep[ad.Name] = ad, true
		}
		// The routers may still send it here: unloading now would fail
		// their requests.
		if slices.Contains(ad.Ready, a.Instance) {
			keep[ad.Name] = true
		}
	}
	loaded, err := a.loaded(ctx, doc.Model)
	if err != nil {
		a.Log.V(1).Info("vLLM adapters unreadable; retrying", "error", err.Error())
		return minBackoff
	}

	next := time.Duration(math.MaxInt64)
	// Unload first what no router sends here any more: it makes room for
	// the adapters placed here.
	for _, name := range slices.Clone(loaded) {
		if keep[name] {
			continue
		}
		if err := a.unload(ctx, name); err != nil {
			a.Log.Info("adapter unload failed", "adapter", name, "error", err.Error())
			next = min(next, minBackoff)
			continue
		}
		loaded = slices.DeleteFunc(loaded, func(n string) bool { return n == name })
		a.Log.Info("adapter unloaded", "adapter", name)
	}
	var failed []routing.LoRAFailure
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if slices.Contains(loaded, name) {
			delete(a.retries, name)
			continue
		}
		r, waiting := a.retries[name]
		if waiting && now.Before(r.at) {
			failed = append(failed, routing.LoRAFailure{Name: name, Reason: r.reason})
			next = min(next, r.at.Sub(now))
			continue
		}
		if err := a.load(ctx, want[name]); err != nil {
			r.delay = min(max(2*r.delay, minBackoff), maxBackoff)
			r.at, r.reason = now.Add(r.delay), err.Error()
			a.retries[name] = r
			failed = append(failed, routing.LoRAFailure{Name: name, Reason: r.reason})
			next = min(next, r.delay)
			a.Log.Info("adapter load failed", "adapter", name, "retryIn", r.delay, "error", r.reason)
			continue
		}
		delete(a.retries, name)
		loaded = append(loaded, name)
		a.Log.Info("adapter loaded", "adapter", name)
	}
	maps.DeleteFunc(a.retries, func(name string, _ retry) bool { _, ok := want[name]; return !ok })

	slices.Sort(loaded)
	st := routing.LoRAState{Loaded: loaded, Failed: failed}
	if a.reported == nil || st.Encode() != a.reported.Encode() {
		if err := a.Report(ctx, st); err != nil {
			a.Log.Error(err, "reporting LoRA state")
			return min(next, minBackoff)
		}
		a.reported = &st
	}
	return next
}

// vllmClient talks to vLLM; a load may download the adapter, hence the
// long timeout.
var vllmClient = &http.Client{Timeout: 5 * time.Minute}

// do sends a request to vLLM with the API key, if there is one.
func (a *Agent) do(req *http.Request) (*http.Response, error) {
	if a.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+a.APIKey)
	}
	return vllmClient.Do(req)
}

// loaded lists the adapters vLLM serves: every model but the base one.
func (a *Agent) loaded(ctx context.Context, base string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.VLLM+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.do(req)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var out []string
	for _, m := range list.Data {
		if m.ID != base && m.Parent != nil {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

// load has vLLM load an adapter: from the path its URI names in the pod,
// or, from object storage, from where the agent downloaded it.
func (a *Agent) load(ctx context.Context, ad routing.Adapter) error {
	path, err := v1alpha1.AdapterLoadPath(ad.URI)
	if err != nil {
		return fmt.Errorf("adapter %s: %w", ad.Name, err)
	}
	if src, _ := v1alpha1.ParseWeightsURI(ad.URI); src.InObjectStore() {
		if a.ObjectStore == nil {
			return fmt.Errorf("adapter %s: %s is in object storage, and this agent has no download directory", ad.Name, ad.URI)
		}
		if path, err = a.ObjectStore.Fetch(ctx, ad.Name, src, ad.S3); err != nil {
			return err
		}
	}
	return a.post(ctx, "/v1/load_lora_adapter", map[string]string{"lora_name": ad.Name, "lora_path": path})
}

// unload removes an adapter, and its download if any; one vLLM no longer
// has is gone already.
func (a *Agent) unload(ctx context.Context, name string) error {
	err := a.post(ctx, "/v1/unload_lora_adapter", map[string]string{"lora_name": name})
	if err != nil && strings.Contains(err.Error(), "404") {
		err = nil
	}
	if err == nil && a.ObjectStore != nil {
		if rmErr := a.ObjectStore.Remove(name); rmErr != nil {
			a.Log.Info("removing an unloaded adapter's download failed", "adapter", name, "error", rmErr.Error())
		}
	}
	return err
}

func (a *Agent) post(ctx context.Context, path string, body map[string]string) error {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.VLLM+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
