package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/warmroute/warmroute/sidecar/router/tenancy"
)

// pythonView is how Python's json, which vLLM parses bodies with, reads a
// body: whether it reads it at all, as an object, and the tenant claim in
// it (prompt_cache_key, else cache_salt, as the router ranks them).
type pythonView struct {
	Object bool    `json:"object"`
	Key    *string `json:"prompt_cache_key"`
	Salt   *string `json:"cache_salt"`
}

const pythonReader = `
import json, sys
try:
    v = json.loads(sys.stdin.buffer.read())
except Exception:
    print("null"); sys.exit(0)
d = v if isinstance(v, dict) else {}
s = lambda x: x if isinstance(x, str) else None
print(json.dumps({"object": isinstance(v, dict), "prompt_cache_key": s(d.get("prompt_cache_key")), "cache_salt": s(d.get("cache_salt"))}))
`

// readByPython reads body with Python's json when python3 is installed
// (nil, false when it is not; a nil view when Python refuses the body).
func readByPython(t *testing.T, body []byte) (*pythonView, bool) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, false
	}
	cmd := exec.Command(py, "-c", pythonReader)
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var v *pythonView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("python3 said %q: %v", out, err)
	}
	return v, true
}

func encodeUTF16(s string, bigEndian bool, bom bool) []byte {
	var out []byte
	units := utf16.Encode([]rune(s))
	if bom {
		units = append([]uint16{0xfeff}, units...)
	}
	for _, u := range units {
		if bigEndian {
			out = append(out, byte(u>>8), byte(u))
		} else {
			out = append(out, byte(u), byte(u>>8))
		}
	}
	return out
}

func encodeUTF32LE(s string) []byte {
	var out []byte
	for _, r := range s {
		out = append(out, byte(r), byte(r>>8), byte(r>>16), byte(r>>24))
	}
	return out
}

// TestBodiesPythonReads is the differential test of the router's JSON
// reader against Python's: each body below is one Python's json reads as
// an object with a tenant claim, several of which a strict JSON reader does
// not (a byte order mark, NaN and Infinity, UTF-16 and UTF-32, repeated
// and escaped keys). Sent to /invocations and to /v1/completions, with and
// without the router's authentication, each must be refused (400, nothing
// reaching vLLM) or reach vLLM with the router's salt as its only
// cache_salt: in default mode the salt of the very claim Python reads, so
// the router and vLLM agree on it; with API keys the key's tenant's.
// With python3 installed the premise (Python reads each body so) and
// every forwarded body are checked with Python itself.
func TestBodiesPythonReads(t *testing.T) {
	const evil = "ATTACKER-CHOSEN"
	plain := `{"prompt":"hi","cache_salt":"` + evil + `"}`
	for _, tc := range []struct {
		name string
		body []byte
		// claim is the tenant Python reads from the body ("" for none).
		claim   string
		refused bool
	}{
		{"plain", []byte(plain), evil, false},
		{"UTF-8 BOM", append([]byte("\xef\xbb\xbf"), plain...), evil, false},
		{"UTF-8 BOM and whitespace", []byte("\xef\xbb\xbf \r\n\t" + plain + "\n"), evil, false},
		{"NaN", []byte(`{"prompt":"hi","temperature":NaN,"cache_salt":"` + evil + `"}`), evil, true},
		{"Infinity", []byte(`{"prompt":"hi","top_p":Infinity,"cache_salt":"` + evil + `"}`), evil, true},
		{"-Infinity", []byte(`{"prompt":"hi","cache_salt":"` + evil + `","presence_penalty":-Infinity}`), evil, true},
		{"a number past float64", []byte(`{"prompt":"hi","seed":1e999,"cache_salt":"` + evil + `"}`), evil, false},
		{"UTF-16-LE", encodeUTF16(plain, false, false), evil, true},
		{"UTF-16-BE", encodeUTF16(plain, true, false), evil, true},
		{"UTF-16 with a BOM", encodeUTF16(plain, false, true), evil, true},
		{"UTF-32-LE", encodeUTF32LE(plain), evil, true},
		{"repeated key, last wins", []byte(`{"cache_salt":"one","prompt":"hi","cache_salt":"` + evil + `"}`), evil, false},
		{"null after a salt", []byte(`{"cache_salt":"` + evil + `","prompt":"hi","cache_salt":null}`), "", false},
		{"escaped key", []byte(`{"prompt":"hi","cache\u005fsalt":"` + evil + `"}`), evil, false},
		{"escaped value", []byte(`{"prompt":"hi","cache_salt":"ATTACKER\u002dCHOSEN"}`), evil, false},
		{"key with a lone surrogate", []byte(`{"prompt":"hi","cache_salt\ud800":"other"}`), "", false},
		{"prompt_cache_key first", []byte(`{"prompt":"hi","cache_salt":"` + evil + `","prompt_cache_key":"k-1"}`), "k-1", false},
		{"escaped prompt_cache_key", []byte(`{"prompt":"hi","prompt\u005fcache_key":"k-2"}`), "k-2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v, ok := readByPython(t, tc.body); ok {
				claim := ""
				switch {
				case v == nil || !v.Object:
					t.Fatalf("premise: Python does not read %q as an object", tc.body)
				case v.Key != nil:
					claim = *v.Key
				case v.Salt != nil:
					claim = *v.Salt
				}
				if claim != tc.claim {
					t.Fatalf("premise: Python reads the claim %q, the table says %q", claim, tc.claim)
				}
			}
			for _, mode := range []struct {
				name   string
				auth   func(t *testing.T) tenancy.Auth
				header []string
				tenant string // whose salt vLLM must get
			}{
				{"unauthenticated", func(*testing.T) tenancy.Auth { return tenancy.Auth{} }, nil, tc.claim},
				{"API keys", func(t *testing.T) tenancy.Auth { return apiKeyAuth(t, map[string]string{"acme": keyA}) }, []string{"Authorization", "Bearer " + keyA}, "acme"},
			} {
				f, _ := saltedFixture(t, mode.auth(t))
				b := f.backends["vllm-0"]
				for _, path := range []string{"/invocations", "/v1/completions"} {
					before := b.count()
					resp, out := f.post(t, path, string(tc.body), mode.header...)
					if tc.refused {
						var e errorBody
						if resp.StatusCode != http.StatusBadRequest || json.Unmarshal([]byte(out), &e) != nil || e.Error.Type != "invalid_request_error" || b.count() != before {
							t.Fatalf("%s, %s: status %d, %d requests reached vLLM: %s", mode.name, path, resp.StatusCode, b.count()-before, out)
						}
						continue
					}
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("%s, %s: status %d: %s", mode.name, path, resp.StatusCode, out)
					}
					want := ""
					if mode.tenant != "" {
						want = wantSalt(testSaltKey, mode.tenant)
					}
					received(t, b, want, evil)
					if v, ok := readByPython(t, b.last()); ok {
						if v == nil || v.Key != nil || (v.Salt == nil) != (want == "") || v.Salt != nil && *v.Salt != want {
							t.Fatalf("%s, %s: Python reads what vLLM got as %+v, want cache_salt %q alone", mode.name, path, v, want)
						}
					}
				}
			}
		})
	}
}

// TestInvocationsClaims: on /invocations, as on the OpenAI paths, a body's
// cache_salt or prompt_cache_key is a tenant claim that becomes a derived
// salt in default mode (never dropped, which would put the client in the
// shared pool it asked to leave), and a body that is no JSON object is
// refused rather than sent on as it came.
func TestInvocationsClaims(t *testing.T) {
	f, _ := saltedFixture(t, tenancy.Auth{})
	b := f.backends["vllm-0"]
	for body, tenant := range map[string]string{
		`{"prompt":"hi","cache_salt":"mine"}`:                        "mine",
		`{"messages":[],"prompt_cache_key":"k","cache_salt":"mine"}`: "k",
		`{"prompt":"hi"}`: "",
	} {
		resp, out := f.post(t, "/invocations", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, out)
		}
		want := ""
		if tenant != "" {
			want = wantSalt(testSaltKey, tenant)
		}
		received(t, b, want, "mine")
	}
	before := b.count()
	for _, body := range []string{`not json at all`, `["prompt"]`, `{"prompt":"hi"} {"cache_salt":"x"}`, `{"prompt_cache_key":7}`} {
		resp, out := f.post(t, "/invocations", body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(out, `"invalid_request_error"`) {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, out)
		}
	}
	if b.count() != before {
		t.Fatal("a refused body reached vLLM")
	}
}
