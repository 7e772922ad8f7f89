package proxy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/tenancy"
	"github.com/warmroute/warmroute/test/vllmsim"
)

var testSaltKey = []byte("0123456789abcdef0123456789abcdef")

// wantSalt is the salt for tenant under key, computed here apart from the
// router's code: HMAC-SHA-256 over a context string and the tenant.
func wantSalt(key []byte, tenant string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("warmroute cache_salt v1\x00" + tenant))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func saltedFixture(t *testing.T, auth tenancy.Auth) (*fixture, *tenancy.Salter) {
	t.Helper()
	salts, err := tenancy.NewSalter(testSaltKey)
	if err != nil {
		t.Fatal(err)
	}
	return newFixture(t, 1, Options{Salts: salts, Auth: auth}), salts
}

// received checks what the simulated vLLM got last: exactly one
// cache_salt key (counted as a streaming parser sees keys, repeats
// included), equal to want ("" for none), no prompt_cache_key, and none of
// the secrets anywhere in its bytes or headers.
func received(t *testing.T, b *backend, want string, secrets ...string) {
	t.Helper()
	body := b.last()
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("backend got %q: %v", body, err)
	}
	var salts []string
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("backend got %q: %v", body, err)
		}
		switch k {
		case "cache_salt":
			var s string
			_ = json.Unmarshal(v, &s)
			salts = append(salts, s)
		case "prompt_cache_key":
			t.Fatalf("prompt_cache_key reached vLLM: %s", body)
		}
	}
	switch {
	case want == "" && len(salts) != 0:
		t.Fatalf("cache_salt %q sent for no tenant: %s", salts, body)
	case want != "" && (len(salts) != 1 || salts[0] != want):
		t.Fatalf("cache_salt keys %q, want exactly [%s]: %s", salts, want, body)
	}
	b.mu.Lock()
	h := b.headers
	b.mu.Unlock()
	for _, s := range secrets {
		if bytes.Contains(body, []byte(s)) {
			t.Fatalf("%q reached vLLM in the body: %s", s, body)
		}
		for name, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, s) {
					t.Fatalf("%q reached vLLM in header %s", s, name)
				}
			}
		}
	}
}

// TestSaltIsDerivedServerSide: whatever a client claims or sends as its
// own cache_salt, vLLM gets one cache_salt, the HMAC of the tenant, never
// the tenant id or the client's salt.
func TestSaltIsDerivedServerSide(t *testing.T) {
	f, _ := saltedFixture(t, tenancy.Auth{})
	b := f.backends["vllm-0"]
	for _, tc := range []struct {
		name, path, body string
		header           []string
		tenant           string // "" for none
		secrets          []string
	}{
		{"header", "/v1/chat/completions", chatBody("m", "hi", ""), []string{"X-Amzn-SageMaker-Prefix-Aware-Id", "tenant-a"}, "tenant-a", []string{"tenant-a"}},
		{"alias header", "/v1/chat/completions", chatBody("m", "hi", ""), []string{"X-Prefix-Aware-Id", "tenant-b"}, "tenant-b", []string{"tenant-b"}},
		{"prompt_cache_key", "/v1/chat/completions", chatBody("m", "hi", `,"prompt_cache_key":"k-one"`), nil, "k-one", []string{"k-one"}},
		{"client salt is the last claim", "/v1/completions", `{"model":"m","prompt":"hi","cache_salt":"client-salt"}`, nil, "client-salt", []string{"client-salt"}},
		{"header wins over client salt", "/v1/chat/completions", chatBody("m", "hi", `,"cache_salt":"client-salt"`), []string{"X-Prefix-Aware-Id", "acme"}, "acme", []string{"acme", "client-salt"}},
		{"null salt and header", "/v1/chat/completions", chatBody("m", "hi", `,"cache_salt":null`), []string{"X-Prefix-Aware-Id", "acme"}, "acme", []string{"acme"}},
		{"repeated, escaped salts", "/v1/chat/completions", `{"cache_salt":"s-one","model":"m","cache\u005fsalt":"s-two","messages":[{"role":"user","content":"hi"}],"cache_salt":null}`, []string{"X-Prefix-Aware-Id", "acme"}, "acme", []string{"s-one", "s-two"}},
		{"no tenant: no salt", "/v1/chat/completions", chatBody("m", "hi", ""), nil, "", nil},
		{"invocations JSON", "/invocations", `{"inputs":"x","cache_salt":"client-salt"}`, []string{"X-Prefix-Aware-Id", "acme"}, "acme", []string{"acme", "client-salt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.post(t, tc.path, tc.body, tc.header...)
			if resp.StatusCode != 200 {
				t.Fatal(body)
			}
			want := ""
			if tc.tenant != "" {
				want = wantSalt(testSaltKey, tc.tenant)
			}
			received(t, b, want, tc.secrets...)
		})
	}
}

// TestTwoTenantsSamePrefixDifferentSalts.
func TestTwoTenantsSamePrefixDifferentSalts(t *testing.T) {
	f, _ := saltedFixture(t, tenancy.Auth{})
	b := f.backends["vllm-0"]
	salt := func(tenant string) string {
		t.Helper()
		if resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "the same long prefix", ""), "X-Prefix-Aware-Id", tenant); resp.StatusCode != 200 {
			t.Fatal(body)
		}
		var v struct {
			Salt string `json:"cache_salt"`
		}
		_ = json.Unmarshal(b.last(), &v)
		return v.Salt
	}
	a1, bb, a2 := salt("a"), salt("b"), salt("a")
	if a1 == bb || a1 != a2 || a1 == "" {
		t.Fatalf("salts a=%q b=%q a again=%q", a1, bb, a2)
	}
}

func writeKeys(t *testing.T, dir string, keys map[string]string) {
	t.Helper()
	for tenant, key := range keys {
		if err := os.WriteFile(filepath.Join(dir, tenant), []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func apiKeyAuth(t *testing.T, keys map[string]string) tenancy.Auth {
	t.Helper()
	dir := t.TempDir()
	writeKeys(t, dir, keys)
	ks := &tenancy.KeyStore{}
	if _, err := ks.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	return tenancy.Auth{Keys: ks}
}

const (
	keyA = "sk-acme-0123456789abcdef"
	keyB = "sk-bravo-0123456789abcdef"
)

func TestAPIKeys(t *testing.T) {
	f, _ := saltedFixture(t, apiKeyAuth(t, map[string]string{"acme": keyA, "bravo": keyB + "\nsk-bravo-next-0123456789\n"}))
	b := f.backends["vllm-0"]
	for _, tc := range []struct {
		name   string
		header []string
		code   string
	}{
		{"missing", nil, "invalid_api_key"},
		{"wrong", []string{"Authorization", "Bearer sk-nobody-0123456789abcdef"}, "invalid_api_key"},
		{"not bearer", []string{"Authorization", "Basic " + keyA}, "invalid_api_key"},
		{"tenant header is no key", []string{"X-Prefix-Aware-Id", "acme"}, "invalid_api_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.count()
			resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "hi", ""), tc.header...)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var e errorBody
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == nil || *e.Error.Code != tc.code || e.Error.Type != "invalid_request_error" {
				t.Fatalf("not an OpenAI 401 body: %s", body)
			}
			if strings.Contains(body, "sk-") {
				t.Fatalf("the key is echoed: %s", body)
			}
			if b.count() != before {
				t.Fatal("a refused request reached vLLM")
			}
		})
	}
	if resp, body := f.get(t, "/v1/models"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/v1/models without a key: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.get(t, "/v1/models", "Authorization", "Bearer "+keyA); resp.StatusCode != 200 {
		t.Fatalf("/v1/models with a key: %d", resp.StatusCode)
	}
	// B claims A's tenant every way it can: it stays B.
	claims := chatBody("m", "hi", `,"prompt_cache_key":"acme","cache_salt":"acme"`)
	for _, key := range []string{keyB, "sk-bravo-next-0123456789"} {
		resp, body := f.post(t, "/v1/chat/completions", claims, "Authorization", "bearer "+key,
			"X-Prefix-Aware-Id", "acme", "X-Amzn-SageMaker-Prefix-Aware-Id", "acme")
		if resp.StatusCode != 200 {
			t.Fatal(body)
		}
		received(t, b, wantSalt(testSaltKey, "bravo"), "acme", key)
	}
	if resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "hi", ""), "Authorization", "Bearer "+keyA); resp.StatusCode != 200 {
		t.Fatal(body)
	}
	received(t, b, wantSalt(testSaltKey, "acme"), keyA)
}

func TestTrustedHeader(t *testing.T) {
	f, _ := saltedFixture(t, tenancy.Auth{TrustedHeader: "X-Gateway-Tenant"})
	b := f.backends["vllm-0"]
	claims := chatBody("m", "hi", `,"prompt_cache_key":"acme","cache_salt":"acme"`)
	resp, body := f.post(t, "/v1/chat/completions", claims, "X-Gateway-Tenant", "bravo", "X-Prefix-Aware-Id", "acme", "X-Amzn-SageMaker-Prefix-Aware-Id", "acme")
	if resp.StatusCode != 200 {
		t.Fatal(body)
	}
	received(t, b, wantSalt(testSaltKey, "bravo"), "acme", "bravo")
	// Without the gateway's header, with it twice (a gateway that appends
	// leaves the client's first), as a list, or too long: refused, before
	// anything reaches vLLM.
	n := b.count()
	for _, tc := range []struct {
		name   string
		header []string
		status int
	}{
		{"absent", []string{"X-Prefix-Aware-Id", "acme"}, http.StatusUnauthorized},
		{"empty", []string{"X-Gateway-Tenant", ""}, http.StatusUnauthorized},
		{"twice", []string{"X-Gateway-Tenant", "victim", "X-Gateway-Tenant", "attacker"}, http.StatusBadRequest},
		{"a list", []string{"X-Gateway-Tenant", "victim, attacker"}, http.StatusBadRequest},
		{"too long", []string{"X-Gateway-Tenant", strings.Repeat("x", 65)}, http.StatusBadRequest},
	} {
		for _, path := range []string{"/v1/chat/completions", "/invocations"} {
			resp, body := f.post(t, path, claims, tc.header...)
			var e errorBody
			if resp.StatusCode != tc.status || json.Unmarshal([]byte(body), &e) != nil || e.Error.Param == nil || *e.Error.Param != "X-Gateway-Tenant" {
				t.Fatalf("%s header on %s: %d %s", tc.name, path, resp.StatusCode, body)
			}
		}
	}
	if b.count() != n {
		t.Fatalf("%d refused requests reached vLLM", b.count()-n)
	}
	if resp, body := f.get(t, "/v1/models"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/v1/models without the header: %d %s", resp.StatusCode, body)
	}
}

// TestSaltKeyRotation: a new key changes every tenant's salt at once, and
// requests in between use one key whole.
func TestSaltKeyRotation(t *testing.T) {
	f, salts := saltedFixture(t, tenancy.Auth{})
	b := f.backends["vllm-0"]
	send := func() {
		t.Helper()
		if resp, body := f.post(t, "/v1/chat/completions", chatBody("m", "hi", ""), "X-Prefix-Aware-Id", "acme"); resp.StatusCode != 200 {
			t.Fatal(body)
		}
	}
	send()
	received(t, b, wantSalt(testSaltKey, "acme"))
	next := []byte("fedcba9876543210fedcba9876543210")
	if err := salts.SetKey(next); err != nil {
		t.Fatal(err)
	}
	send()
	received(t, b, wantSalt(next, "acme"))
	if err := salts.SetKey([]byte("short")); err == nil {
		t.Fatal("a short key was taken")
	}
	send()
	received(t, b, wantSalt(next, "acme"))
}

// TestTenantsShareNoCache runs the router in front of the simulated vLLM,
// whose prefix cache honours cache_salt as vLLM's does: with API keys,
// tenant B gets no cache hit on tenant A's prompt even when it claims A's
// tenant id every way; A, repeating itself, does.
func TestTenantsShareNoCache(t *testing.T) {
	sim, err := vllmsim.Start(vllmsim.Config{Listen: "127.0.0.1:0", Model: "m", TimeScale: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	salts, _ := tenancy.NewSalter(testSaltKey)
	r := New(Options{AllowLoopbackBackends: true, Salts: salts, Auth: apiKeyAuth(t, map[string]string{"acme": keyA, "bravo": keyB})})
	if err := r.Apply(document(routingv1alpha1.StrategyPrefixAware, map[string]string{"vllm-0": sim.Addr()})); err != nil {
		t.Fatal(err)
	}
	base := newServer(t, r)
	prompt := strings.Repeat("a confidential system prompt of tenant acme. ", 40)
	cached := func(key string, header ...string) int {
		t.Helper()
		body := chatBody("m", prompt, `,"max_tokens":1,"prompt_cache_key":"acme","cache_salt":"acme"`)
		resp, out := postURL(t, base+"/v1/chat/completions", body, append([]string{"Authorization", "Bearer " + key}, header...)...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		u := usageOf(t, out)
		if u.PromptTokens == 0 {
			t.Fatalf("no usage in %s", out)
		}
		return int(u.PromptTokensDetails.CachedTokens)
	}
	if n := cached(keyA); n != 0 {
		t.Fatalf("first request hit %d tokens", n)
	}
	if n := cached(keyB, "X-Prefix-Aware-Id", "acme"); n != 0 {
		t.Fatalf("tenant B hit %d cached tokens of tenant A's prompt", n)
	}
	if n := cached(keyA); n == 0 {
		t.Fatal("tenant A's repeat hit nothing: the test would show nothing")
	}
	// Unauthenticated requests never reach the simulator.
	before := sim.Stats().Requests
	resp, _ := postURL(t, base+"/v1/chat/completions", chatBody("m", prompt, ""), "X-Prefix-Aware-Id", "acme")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if sim.Stats().Requests != before {
		t.Fatal("a refused request reached vLLM")
	}
}

func (f *fixture) get(t testing.TB, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	return do(t, req, header...)
}

// TestClientForwardingHeadersIgnored: vLLM sees the address the router got
// the request from, whatever X-Forwarded-* a client sends, with or without
// the forwarding marker routers once trusted from each other.
func TestClientForwardingHeadersIgnored(t *testing.T) {
	f := newFixture(t, 1, Options{})
	b := f.backends["vllm-0"]
	for _, marker := range []string{"", "1"} {
		header := []string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "gopher"}
		if marker != "" {
			header = append(header, "X-Warmroute-Forwarded", marker)
		}
		resp, out := f.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`, header...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		b.mu.Lock()
		h := b.headers.Clone()
		b.mu.Unlock()
		if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("marker %q: vLLM got X-Forwarded-For %q, want only the client's address 127.0.0.1", marker, got)
		}
		if got := h.Get("X-Forwarded-Host"); got == "evil.example" {
			t.Errorf("marker %q: vLLM got the client's X-Forwarded-Host", marker)
		}
		if got := h.Get("X-Forwarded-Proto"); got != "http" {
			t.Errorf("marker %q: vLLM got X-Forwarded-Proto %q, want http", marker, got)
		}
	}
}
