package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// replaceFile swaps a file's content in one rename, as a mounted Secret
// changes all at once.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestTenancyReloads: a rotated salt key and changed API keys take effect
// without a restart; a bad key file leaves the last good key in force.
func TestTenancyReloads(t *testing.T) {
	saltDir, keysDir := t.TempDir(), t.TempDir()
	keyFile := filepath.Join(saltDir, "key")
	key1, key2 := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	replaceFile(t, keyFile, key1)
	replaceFile(t, filepath.Join(keysDir, "acme"), "sk-acme-0123456789ab")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	f, err := parseFlags([]string{"--config-dir", "x", "--cache-salt-key-file", keyFile, "--api-keys-dir", keysDir})
	if err != nil {
		t.Fatal(err)
	}
	salts, auth, err := startTenancy(ctx, &wg, f.tenancy, 10*time.Millisecond, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	want := func(key string) string {
		s, _ := tenancy.NewSalter([]byte(key))
		return s.Salt("acme")
	}
	if salts.Salt("acme") != want(key1) {
		t.Fatal("salt not under the mounted key")
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	replaceFile(t, keyFile, key2+"\n")
	eventually("rotated salt key not taken", func() bool { return salts.Salt("acme") == want(key2) })
	replaceFile(t, keyFile, "short")
	replaceFile(t, filepath.Join(keysDir, "bravo"), "sk-bravo-0123456789a")
	eventually("new API key not taken", func() bool { _, ok := auth.Keys.Tenant("sk-bravo-0123456789a"); return ok })
	if salts.Salt("acme") != want(key2) {
		t.Fatal("a short key file replaced the key")
	}
	// Without a key file the router starts, with a key of its own.
	f, _ = parseFlags([]string{"--config-dir", "x"})
	if s, a, err := startTenancy(ctx, &wg, f.tenancy, time.Second, logr.Discard()); err != nil || s == nil || a.Authenticated() {
		t.Fatalf("defaults: %v %v", a, err)
	}
	// A missing key file is an error at start, not a silent random key.
	f, _ = parseFlags([]string{"--config-dir", "x", "--cache-salt-key-file", filepath.Join(saltDir, "nope")})
	if _, _, err := startTenancy(ctx, &wg, f.tenancy, time.Second, logr.Discard()); err == nil {
		t.Fatal("missing key file accepted")
	}
}

func TestTenancyFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--config-dir", "a", "--tenant-header", "X-Tenant"}, true},
		{[]string{"--config-dir", "a", "--tenant-header", "X Tenant"}, false},
		{[]string{"--config-dir", "a", "--tenant-header", "X-Tenant", "--api-keys-dir", "/k"}, false},
	} {
		if _, err := parseFlags(tc.args); (err == nil) != tc.ok {
			t.Errorf("%v: err %v", tc.args, err)
		}
	}
}

// TestUpstreamAPIKeyFromEnv: the key comes from the environment as is,
// and the log says whether it is used without ever saying it.
func TestUpstreamAPIKeyFromEnv(t *testing.T) {
	const key = "sk-vllm-secret-0123456789\n"
	t.Setenv(upstreamAPIKeyEnv, key)
	for _, auth := range []tenancy.Auth{{}, {TrustedHeader: "X-Tenant"}} {
		var logged strings.Builder
		log := funcr.New(func(prefix, args string) { logged.WriteString(prefix + args + "\n") }, funcr.Options{})
		if got := upstreamAPIKey(auth, log); got != key {
			t.Errorf("key %q, want %q", got, key)
		}
		if logged.Len() == 0 || strings.Contains(logged.String(), "sk-vllm") {
			t.Errorf("log %q: want a line, without the key", logged.String())
		}
	}
	t.Setenv(upstreamAPIKeyEnv, "")
	if got := upstreamAPIKey(tenancy.Auth{}, logr.Discard()); got != "" {
		t.Errorf("key %q without the variable", got)
	}
}
