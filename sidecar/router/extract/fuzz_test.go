package extract

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzOpenAI(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9\ud83d\ude00"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
		`{"prompt":[[1,2],[3]],"prompt_cache_key":"k"}`,
		`{"prompt":"x","cache_salt":"s"}`,
		`{"cache_salt":null,"prompt":"x","cache\u005fsalt":"s","prompt_cache_key":"k"}`,
		`{"cache_salt":"s"}`, ` {} `,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
		"{\"prompt\":\"\xff\"}", `[`, `{"a":}`,
		// Escape-heavy, non-ASCII and surrogate-pair text, cut by the
		// 16-character window and 8-byte lookahead at every place.
		`{"prompt":"` + strings.Repeat(`\u4e2d\u6587`, 8) + `"}`,
		`{"prompt":"` + strings.Repeat(`\ud83d\ude00`, 12) + `"}`,
		`{"prompt":"a\ud83d\ud83d\ude00\ude00\ud83dx\ud83d\u0041\ud83d\n"}`,
		`{"prompt":"a` + strings.Repeat(`\\`, 40) + `"}`,
		`{"prompt":["` + strings.Repeat(`x\n`, 10) + `","\"\/\b\f\r\t"]}`,
		`{"messages":[{"role":"user","content":"中文 ` + strings.Repeat(`\u00e9`, 20) + ` ok"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat(`\ud83d\ude00\n`, 6) + `"},{"text":"` + strings.Repeat(`\\`, 9) + `"}]}]}`,
		`{"\u006dessages":[{"\u0072ole":"user","content":"\u00e9t\u00e9"}],"\u006dodel":"m\u00e9"}`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"\xe4\xb8\xad\xff\\u4e2d\"}]}",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
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
		if valid && utf8.Valid(body) { // encoding/json replaces invalid UTF-8
			if want, ok := promptBytes(kind, body); ok && r.PromptBytes != want {
				t.Fatalf("PromptBytes %d, encoding/json counts %d", r.PromptBytes, want)
			}
		}
		// Re-indenting must not change the key.
		var buf bytes.Buffer
		if valid && json.Indent(&buf, body, "", "  ") == nil {
			r2, err := OpenAI(kind, buf.Bytes(), "", lim)
			if err != nil || !bytes.Equal(r.Text, r2.Text) || r.Model != r2.Model {
				t.Fatalf("indentation changed the key: %q vs %q (%v)", r.Text, r2.Text, err)
			}
		}
		if valid {
			for _, salt := range []string{"t", ""} {
				pieces, err := SaltedBody(body, salt, r.TenantFields)
				if err != nil {
					t.Fatalf("SaltedBody refused an accepted body %q: %v", body, err)
				}
				out := bytes.Join(pieces, nil)
				if !json.Valid(out) {
					t.Fatalf("cache_salt made invalid JSON: %q → %q", body, out)
				}
				r2, err := OpenAI(kind, out, "", lim)
				if err != nil || r2.ClientSalt != salt || r2.PromptCacheKey != "" || !bytes.Equal(r.Text, r2.Text) {
					t.Fatalf("salted body %q reads as salt %q, key %q, text %q (%v)", out, r2.ClientSalt, r2.PromptCacheKey, r2.Text, err)
				}
			}
		}
	})
}

// promptBytes is PromptBytes computed from encoding/json's reading of a
// body; false when that reading is ambiguous (a part with both a text and
// a refusal, whose order a map loses).
func promptBytes(kind Kind, body []byte) (int, bool) {
	var v map[string]any // exact keys, unlike a struct's fields
	if json.Unmarshal(body, &v) != nil {
		return 0, false
	}
	n := 0
	text := func(part any) {
		if s, ok := part.(string); ok {
			n += len(s)
		}
	}
	if kind == Completions {
		text(v["prompt"])
		if list, ok := v["prompt"].([]any); ok {
			for _, p := range list {
				text(p)
			}
		}
		return n, true
	}
	messages, _ := v["messages"].([]any)
	for _, m := range messages {
		msg, _ := m.(map[string]any)
		text(msg["content"])
		parts, _ := msg["content"].([]any)
		for _, p := range parts {
			obj, _ := p.(map[string]any)
			_, hasText := obj["text"]
			_, hasRefusal := obj["refusal"]
			if hasText && hasRefusal {
				return 0, false
			}
			text(obj["text"])
			text(obj["refusal"])
		}
	}
	return n, true
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
	f.Add([]byte(`{"inputs":"raw body","cache_salt":"s"}`), "tenant")
	f.Add([]byte("\xef\xbb\xbf{\"stream\":true}"), "")
	f.Add([]byte{0xff, 0}, "")
	f.Fuzz(func(t *testing.T, body []byte, tenant string) {
		r, err := Invocations(body, tenant, Limits{Window: 8, Lookahead: 4})
		if err != nil {
			// Whatever encoding/json reads as an object (not nested past
			// the scanner's bound) must be read.
			if ValidTenant(tenant) == nil && json.Valid(body) && isObject(body) && bytes.Count(body, []byte("{"))+bytes.Count(body, []byte("[")) < maxDepth {
				t.Fatalf("valid body refused: %v", err)
			}
			return
		}
		if !bytes.HasPrefix(bytes.TrimPrefix(body, utf8BOM), r.Text) || r.WindowBytes > len(r.Text) || len(r.Text) > 12 {
			t.Fatalf("text %q window %d of %q", r.Text, r.WindowBytes, body)
		}
	})
}
