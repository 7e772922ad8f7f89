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
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/test/vllmsim"
)

func startSim(t *testing.T, cfg vllmsim.Config) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg.Listen, cfg.Model, cfg.InstanceID = addr, "base", "pod-a"
	srv, err := vllmsim.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + addr
}

func doc(adapters ...routing.Adapter) *routing.Document {
	return &routing.Document{Model: "base", Adapters: adapters}
}

// TestAgentSync walks one instance through a placement's life against the
// simulator: load what is desired, report a failure with vLLM's reason and
// back off, keep an adapter the routers still send here, unload it once
// they do not.
func TestAgentSync(t *testing.T) {
	ctx := context.Background()
	var reports []routing.LoRAState
	a := &Agent{
		Instance: "pod-a",
		VLLM:     startSim(t, vllmsim.Config{MaxLoRAs: 2, LoRAFail: []string{"broken"}}),
		Report:   func(_ context.Context, st routing.LoRAState) error { reports = append(reports, st); return nil },
		Log:      logr.Discard(),
	}
	now := time.Now()
	last := func() routing.LoRAState { return reports[len(reports)-1] }

	_ = a.Apply(doc(
		routing.Adapter{Name: "sql", URI: "org/sql", Desired: []string{"pod-a"}},
		routing.Adapter{Name: "broken", URI: "org/broken", Desired: []string{"pod-a"}},
		routing.Adapter{Name: "elsewhere", URI: "org/x", Desired: []string{"pod-b"}},
	))
	next := a.Sync(ctx, now)
	if got := last(); !slices.Equal(got.Loaded, []string{"sql"}) || len(got.Failed) != 1 || got.Failed[0].Name != "broken" {
		t.Fatalf("after the first sync: %+v", got)
	}
	if next != minBackoff {
		t.Errorf("retry in %v, want %v", next, minBackoff)
	}
	// Before the back-off ends nothing is retried and nothing re-reported.
	a.Sync(ctx, now.Add(minBackoff/2))
	if len(reports) != 1 {
		t.Errorf("%d reports, want 1 (no change)", len(reports))
	}
	if next := a.Sync(ctx, now.Add(minBackoff)); next != 2*minBackoff {
		t.Errorf("second retry in %v, want %v", next, 2*minBackoff)
	}

	// sql moves to pod-b but the routers still send it here: kept.
	_ = a.Apply(doc(routing.Adapter{Name: "sql", URI: "org/sql", Desired: []string{"pod-b"}, Ready: []string{"pod-a"}}))
	a.Sync(ctx, now)
	if got := last(); !slices.Equal(got.Loaded, []string{"sql"}) || len(got.Failed) != 0 {
		t.Fatalf("while moving: %+v", got)
	}
	// The routers stopped sending it here: unloaded.
	_ = a.Apply(doc(routing.Adapter{Name: "sql", URI: "org/sql", Desired: []string{"pod-b"}, Ready: []string{"pod-b"}}))
	a.Sync(ctx, now)
	if got := last(); len(got.Loaded) != 0 {
		t.Fatalf("after the move: %+v", got)
	}
}

// TestAgentMakesRoomForDesired: an instance full of adapters it is moving
// away from unloads them when a desired one does not fit, but only once no
// router sends them here: an adapter still in a ready set keeps serving and
// the desired one waits (and is reported failed, to retry).
func TestAgentMakesRoomForDesired(t *testing.T) {
	ctx := context.Background()
	var st routing.LoRAState
	a := &Agent{
		Instance: "pod-a",
		VLLM:     startSim(t, vllmsim.Config{MaxLoRAs: 1}),
		Report:   func(_ context.Context, s routing.LoRAState) error { st = s; return nil },
		Log:      logr.Discard(),
	}
	_ = a.Apply(doc(routing.Adapter{Name: "old", URI: "org/old", Desired: []string{"pod-a"}}))
	a.Sync(ctx, time.Now())

	// old moves to pod-b, which has not loaded it yet: the routers still
	// send old here, so it stays and new cannot load.
	_ = a.Apply(doc(
		routing.Adapter{Name: "old", URI: "org/old", Desired: []string{"pod-b"}, Ready: []string{"pod-a"}},
		routing.Adapter{Name: "new", URI: "org/new", Desired: []string{"pod-a"}},
	))
	a.Sync(ctx, time.Now())
	if !slices.Equal(st.Loaded, []string{"old"}) || len(st.Failed) != 1 || st.Failed[0].Name != "new" {
		t.Fatalf("state %+v, want old kept (still routed here) and new failed", st)
	}

	// pod-b has it and the routers moved: room for new.
	_ = a.Apply(doc(
		routing.Adapter{Name: "old", URI: "org/old", Desired: []string{"pod-b"}, Ready: []string{"pod-b"}},
		routing.Adapter{Name: "new", URI: "org/new", Desired: []string{"pod-a"}},
	))
	a.Sync(ctx, time.Now().Add(time.Hour)) // past the back-off
	if !slices.Equal(st.Loaded, []string{"new"}) || len(st.Failed) != 0 {
		t.Fatalf("state %+v, want new loaded", st)
	}
}

// TestAgentSendsVLLMAPIKey: vLLM started with --api-key refuses /v1
// requests without it, so an agent without the key loads nothing and says
// why, and one with it works.
func TestAgentSendsVLLMAPIKey(t *testing.T) {
	sim, err := url.Parse(startSim(t, vllmsim.Config{MaxLoRAs: 2}))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(sim)
	// vLLM's --api-key guard: bearer token on every /v1 path.
	guarded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1") && r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, `{"error":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(guarded.Close)

	for _, tt := range []struct {
		key        string
		wantLoaded bool
	}{{"", false}, {"wrong", false}, {"s3cret", true}} {
		var st *routing.LoRAState
		a := &Agent{
			Instance: "pod-a", VLLM: guarded.URL, APIKey: tt.key, Log: logr.Discard(),
			Report: func(_ context.Context, s routing.LoRAState) error { st = &s; return nil },
		}
		_ = a.Apply(doc(routing.Adapter{Name: "sql", URI: "org/sql", Desired: []string{"pod-a"}}))
		a.Sync(context.Background(), time.Now())
		loaded := st != nil && slices.Equal(st.Loaded, []string{"sql"})
		if loaded != tt.wantLoaded {
			t.Errorf("key %q: state %+v, want loaded %v", tt.key, st, tt.wantLoaded)
		}
	}
}
