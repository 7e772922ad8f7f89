package tenancy

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// secretDir lays files out as the kubelet mounts a Secret: a timestamped
// directory, a ..data link to it, and one link per key through ..data.
// Calling it again swaps ..data atomically to a new directory.
func secretDir(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..stamp-"+stamp)
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(data, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestKeyStore(t *testing.T) {
	dir := t.TempDir()
	secretDir(t, dir, "1", map[string]string{"acme": "sk-acme-0123456789ab\n", "bravo": "sk-bravo-0123456789a\nsk-bravo-new-0123456\n"})
	ks := &KeyStore{}
	if changed, err := ks.LoadDir(dir); err != nil || !changed {
		t.Fatalf("load: %v %v", changed, err)
	}
	for key, want := range map[string]string{"sk-acme-0123456789ab": "acme", "sk-bravo-0123456789a": "bravo", "sk-bravo-new-0123456": "bravo", "sk-acme-0123456789a": "", "": ""} {
		if got, ok := ks.Tenant(key); got != want || ok != (want != "") {
			t.Errorf("key %q: tenant %q %v, want %q", key, got, ok, want)
		}
	}
	if changed, _ := ks.LoadDir(dir); changed {
		t.Error("an unchanged directory reloaded")
	}
	// Rotation: the kubelet swaps ..data; the old key stops working.
	secretDir(t, dir, "2", map[string]string{"acme": "sk-acme-rotated-01234", "bravo": "sk-bravo-new-0123456"})
	if changed, err := ks.LoadDir(dir); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if _, ok := ks.Tenant("sk-acme-0123456789ab"); ok {
		t.Error("a rotated-out key still works")
	}
	if got, _ := ks.Tenant("sk-acme-rotated-01234"); got != "acme" {
		t.Errorf("rotated key: %q", got)
	}
	// A bad Secret is refused and the keys in force stay.
	for name, files := range map[string]map[string]string{
		"one key, two tenants": {"acme": "sk-shared-0123456789", "bravo": "sk-shared-0123456789"},
		"short key":            {"acme": "short"},
		"no keys":              {"acme": "\n"},
	} {
		bad := t.TempDir()
		secretDir(t, bad, "1", files)
		if _, err := ks.LoadDir(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got, _ := ks.Tenant("sk-acme-rotated-01234"); got != "acme" {
		t.Error("a refused Secret replaced the keys")
	}
}

func TestIdentify(t *testing.T) {
	dir := t.TempDir()
	secretDir(t, dir, "1", map[string]string{"acme": "sk-acme-0123456789ab"})
	keys := &KeyStore{}
	if _, err := keys.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		auth    Auth
		header  http.Header
		want    Identity
		outcome Outcome
	}{
		{"claimed", Auth{}, h("X-Prefix-Aware-Id", "a"), Identity{Tenant: "a", Param: "X-Amzn-SageMaker-Prefix-Aware-Id", Claim: true}, Resolved},
		{"SageMaker header first", Auth{}, h("X-Prefix-Aware-Id", "a", "X-Amzn-SageMaker-Prefix-Aware-Id", "s"), Identity{Tenant: "s", Param: "X-Amzn-SageMaker-Prefix-Aware-Id", Claim: true}, Resolved},
		{"key", Auth{Keys: keys}, h("Authorization", "Bearer sk-acme-0123456789ab", "X-Prefix-Aware-Id", "b"), Identity{Tenant: "acme"}, Resolved},
		{"key, lower-case scheme", Auth{Keys: keys}, h("Authorization", "bearer  sk-acme-0123456789ab "), Identity{Tenant: "acme"}, Resolved},
		{"no key", Auth{Keys: keys}, h("X-Prefix-Aware-Id", "acme"), Identity{}, MissingKey},
		{"empty bearer", Auth{Keys: keys}, h("Authorization", "Bearer "), Identity{}, MissingKey},
		{"wrong key", Auth{Keys: keys}, h("Authorization", "Bearer sk-acme-0123456789aX"), Identity{}, WrongKey},
		{"trusted header", Auth{TrustedHeader: "X-Tenant"}, h("X-Tenant", "g", "X-Prefix-Aware-Id", "b"), Identity{Tenant: "g", Param: "X-Tenant"}, Resolved},
		{"trusted header absent", Auth{TrustedHeader: "X-Tenant"}, h("X-Prefix-Aware-Id", "b"), Identity{Param: "X-Tenant"}, MissingHeader},
		{"trusted header empty", Auth{TrustedHeader: "X-Tenant"}, h("X-Tenant", " "), Identity{Param: "X-Tenant"}, MissingHeader},
		{"trusted header twice", Auth{TrustedHeader: "X-Tenant"}, http.Header{"X-Tenant": {"victim", "attacker"}}, Identity{Param: "X-Tenant"}, AmbiguousHeader},
		{"trusted header as a list", Auth{TrustedHeader: "X-Tenant"}, h("X-Tenant", "victim, attacker"), Identity{Param: "X-Tenant"}, AmbiguousHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, outcome := tc.auth.Identify(tc.header)
			if got != tc.want || outcome != tc.outcome {
				t.Fatalf("got %+v %v, want %+v %v", got, outcome, tc.want, tc.outcome)
			}
		})
	}
}

func TestSalt(t *testing.T) {
	s, err := NewSalter([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Salt("") != "" {
		t.Error("no tenant got a salt")
	}
	a, b := s.Salt("a"), s.Salt("b")
	if a == b || a == "" || a != s.Salt("a") {
		t.Errorf("salts %q %q", a, b)
	}
	r1, r2 := RandomSalter(), RandomSalter()
	if r1.Salt("a") == a || r1.Salt("a") == r2.Salt("a") {
		t.Error("random keys repeat")
	}
	if _, err := NewSalter([]byte("short")); err == nil {
		t.Error("short key accepted")
	}
}

// TestLoadFile: a random key keeps all its bytes, even one that ends in a
// newline byte (as the operator's 32 random bytes do one time in 256); a
// key written by hand loses its trailing newline; a short one is refused,
// and the key in force kept.
func TestLoadFile(t *testing.T) {
	random := "0123456789abcdef0123456789abcde\n"
	for _, tt := range []struct {
		name, file, want string
		err              bool
	}{
		{name: "random bytes ending in a newline", file: random, want: random},
		{name: "hand-written with a newline", file: "0123456789abcdef0123456789abcdef\n", want: "0123456789abcdef0123456789abcdef"},
		{name: "as is", file: "0123456789abcdef0123456789abcdef", want: "0123456789abcdef0123456789abcdef"},
		{name: "short", file: "short\n", err: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			s := RandomSalter()
			before := s.key.Load()
			changed, err := s.LoadFile(path)
			if tt.err {
				if err == nil || changed || s.key.Load() != before {
					t.Fatalf("read %q as a key", s.key.Load().key)
				}
				return
			}
			if key := s.key.Load().key; err != nil || !changed || string(key) != tt.want {
				t.Fatalf("LoadFile = %v, %v, key %q; want %q", changed, err, key, tt.want)
			}
			if changed, _ := s.LoadFile(path); changed {
				t.Error("an unchanged key reloaded")
			}
		})
	}
}

// BenchmarkSalt is the per-request cost of deriving a tenant's salt.
func BenchmarkSalt(b *testing.B) {
	s := RandomSalter()
	b.ReportAllocs()
	for range b.N {
		_ = s.Salt("tenant-0123")
	}
}

// BenchmarkKeyLookup is the per-request cost of finding an API key's
// tenant among 100 keys (all compared, whatever matches).
func BenchmarkKeyLookup(b *testing.B) {
	dir := b.TempDir()
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("tenant-%03d", i)), fmt.Appendf(nil, "sk-key-of-tenant-%03d-0123456789", i), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	ks := &KeyStore{}
	if _, err := ks.LoadDir(dir); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for range b.N {
		if _, ok := ks.Tenant("sk-key-of-tenant-042-0123456789"); !ok {
			b.Fatal("not found")
		}
	}
}
