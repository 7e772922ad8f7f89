package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
	"github.com/warmroute/warmroute/test/vllmsim"
)

const upstreamKey = "sk-vllm-upstream-0123456789"

// keyedVLLM is the simulated vLLM started with --api-key upstreamKey,
// behind a recorder of the Authorization headers it was sent.
type keyedVLLM struct {
	sim  *vllmsim.Server
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // Authorization of each /v1 request, "" for none
}

func startKeyedVLLM(t *testing.T) *keyedVLLM {
	t.Helper()
	sim, err := vllmsim.New(vllmsim.Config{Model: "m", TimeScale: 0.001, APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	k := &keyedVLLM{sim: sim}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1") {
			k.mu.Lock()
			k.seen = append(k.seen, strings.Join(r.Header.Values("Authorization"), ", "))
			k.mu.Unlock()
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { k.srv.Close(); _ = sim.Close() })
	return k
}

// last is the Authorization vLLM got on the last /v1 request.
func (k *keyedVLLM) last(t *testing.T) string {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.seen) == 0 {
		t.Fatal("nothing reached vLLM")
	}
	return k.seen[len(k.seen)-1]
}

func (k *keyedVLLM) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.seen)
}

func (k *keyedVLLM) router(t *testing.T, opts Options) string {
	t.Helper()
	opts.AllowLoopbackBackends = true
	r := New(opts)
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"vllm-0": strings.TrimPrefix(k.srv.URL, "http://")})); err != nil {
		t.Fatal(err)
	}
	return newServer(t, r)
}

// TestUpstreamAPIKey runs the router in front of a simulated vLLM that
// requires its API key. With router auth on, the router authenticates the
// client and vLLM gets vLLM's key, never the client's; with router auth
// off, the client's Authorization goes through unchanged and vLLM judges
// it, even when the router knows vLLM's key.
func TestUpstreamAPIKey(t *testing.T) {
	body := chatBody("m", "hi", `,"max_tokens":1`)
	send := func(t *testing.T, base string, header ...string) int {
		t.Helper()
		resp, out := postURL(t, base+"/v1/chat/completions", body, header...)
		if strings.Contains(out, upstreamKey) {
			t.Fatalf("vLLM's key in the answer: %s", out)
		}
		return resp.StatusCode
	}

	t.Run("API keys", func(t *testing.T) {
		k := startKeyedVLLM(t)
		auth := apiKeyAuth(t, map[string]string{"acme": keyA})
		base := k.router(t, Options{Auth: auth, UpstreamAPIKey: upstreamKey})
		if code := send(t, base, "Authorization", "Bearer "+keyA); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		if got := k.last(t); got != "Bearer "+upstreamKey {
			t.Fatalf("vLLM got Authorization %q, want its own key alone", got)
		}
		// The router's 401 still comes first: no key, nothing reaches vLLM.
		n := k.count()
		if code := send(t, base); code != http.StatusUnauthorized || k.count() != n {
			t.Fatalf("status %d, %d requests reached vLLM", code, k.count()-n)
		}
		// Without the upstream key the router strips the client's key and
		// vLLM refuses: what the key fixes.
		bare := k.router(t, Options{Auth: auth})
		if code := send(t, bare, "Authorization", "Bearer "+keyA); code != http.StatusUnauthorized {
			t.Fatalf("status %d without the upstream key", code)
		}
	})

	t.Run("trusted header", func(t *testing.T) {
		k := startKeyedVLLM(t)
		base := k.router(t, Options{Auth: tenancy.Auth{TrustedHeader: "X-Gateway-Tenant"}, UpstreamAPIKey: upstreamKey})
		if code := send(t, base, "X-Gateway-Tenant", "acme", "Authorization", "Bearer gateway-token"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		if got := k.last(t); got != "Bearer "+upstreamKey {
			t.Fatalf("vLLM got Authorization %q", got)
		}
		// A request that did not come through the gateway never gets
		// vLLM's key: it is refused before anything is sent.
		n := k.count()
		if code := send(t, base, "Authorization", "Bearer gateway-token"); code != http.StatusUnauthorized || k.count() != n {
			t.Fatalf("without the header: status %d, %d requests reached vLLM", code, k.count()-n)
		}
	})

	t.Run("auth off", func(t *testing.T) {
		k := startKeyedVLLM(t)
		// The router knows vLLM's key but must not lend it to anyone.
		base := k.router(t, Options{UpstreamAPIKey: upstreamKey})
		for _, tc := range []struct {
			authorization string
			want          int
		}{
			{"", http.StatusUnauthorized},
			{"Bearer wrong-0123456789", http.StatusUnauthorized},
			{"Bearer " + upstreamKey, http.StatusOK},
		} {
			var header []string
			if tc.authorization != "" {
				header = []string{"Authorization", tc.authorization}
			}
			if code := send(t, base, header...); code != tc.want {
				t.Fatalf("Authorization %q: status %d, want %d", tc.authorization, code, tc.want)
			}
			if got := k.last(t); got != tc.authorization {
				t.Fatalf("client sent Authorization %q, vLLM got %q", tc.authorization, got)
			}
		}
	})
}
