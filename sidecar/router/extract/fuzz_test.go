package extract

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func FuzzOpenAI(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9\ud83d\ude00"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
		`{"prompt":[[1,2],[3]],"prompt_cache_key":"k"}`,
		`{"prompt":"x","cache_salt":"s"}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
		"{\"prompt\":\"\xff\"}", `[`, `{"a":}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, k uint8) {
		kind := Kind(k % 2)
		lim := Limits{Window: 16, Lookahead: 8}
		r, err := OpenAI(kind, body, "", lim)
		var se *SyntaxError
		valid := json.Valid(body)
		if err == nil && !valid && !hasControl(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if errors.As(err, &se) && valid && isObject(body) && !bytes.Contains(body, []byte("[[[[[[[[")) {
			t.Fatalf("rejected valid JSON %q: %v", body, err)
		}
		if err != nil {
			return
		}
		if r.WindowBytes > len(r.Text) {
			t.Fatalf("window %d > text %d", r.WindowBytes, len(r.Text))
		}
		// Re-indenting must not change the key.
		var buf bytes.Buffer
		if valid && json.Indent(&buf, body, "", "  ") == nil {
			r2, err := OpenAI(kind, buf.Bytes(), "", lim)
			if err != nil || !bytes.Equal(r.Text, r2.Text) || r.Model != r2.Model {
				t.Fatalf("indentation changed the key: %q vs %q (%v)", r.Text, r2.Text, err)
			}
		}
		if !r.HasCacheSalt && valid {
			if out := WithCacheSalt(body, "t"); !json.Valid(out) {
				t.Fatalf("cache_salt made invalid JSON: %q", out)
			}
		}
	})
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return true
		}
	}
	return bytes.ContainsAny(b, "\t\n\r") // also invalid inside strings
}

func isObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

func FuzzInvocations(f *testing.F) {
	f.Add([]byte("raw body"), "tenant")
	f.Add([]byte{0xff, 0}, "")
	f.Fuzz(func(t *testing.T, body []byte, tenant string) {
		r, err := Invocations(body, tenant, Limits{Window: 8, Lookahead: 4})
		if err != nil {
			if ValidTenant(tenant) == nil {
				t.Fatalf("valid tenant refused: %v", err)
			}
			return
		}
		if !bytes.HasPrefix(body, r.Text) || r.WindowBytes > len(r.Text) || len(r.Text) > 12 {
			t.Fatalf("text %q window %d of %q", r.Text, r.WindowBytes, body)
		}
	})
}
