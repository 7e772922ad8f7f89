package extract

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

var lim = Limits{Window: 4096, Lookahead: 4096}

func chat(t *testing.T, body string) Request {
	t.Helper()
	r, err := OpenAI(Chat, []byte(body), "", lim)
	if err != nil {
		t.Fatalf("OpenAI(%s): %v", body, err)
	}
	return r
}

func TestChatShapesGiveTheSameKey(t *testing.T) {
	// Each group must produce one routing text; different groups different.
	groups := [][]string{
		{
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
			`{ "messages" : [ { "content" : "Be brief." , "role" : "system" } , { "content":"Hi","role":"user" } ] , "model" : "m" }`,
			"{\n\t\"messages\": [\n {\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \"Be brief.\"}]},\n {\"role\": \"user\", \"content\": [{\"text\": \"Hi\", \"type\": \"text\"}]}\n ],\n \"model\": \"m\", \"stream\": true}",
			`{"model":"m","messages":[{"role":"system","content":"Be \u0062rief."},{"role":"\u0075ser","content":"H\u0069"}],"temperature":0.5,"extra":{"a":[1,2,{"b":null}]}}`,
		},
		{
			`{"model":"m","messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
		},
		{
			`{"model":"m","messages":[{"role":"system","content":"Be brief.Hi"}]}`,
		},
		{
			`{"model":"m","messages":[{"role":"user","content":"What is the weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`,
			`{"messages":[{"content":"What is the weather?","role":"user"},{"tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"weather"},"type":"function","id":"c1"}],"role":"assistant"},{"content":[{"type":"text","text":"sunny"}],"tool_call_id":"c1","role":"tool"}],"model":"m"}`,
		},
		{
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":"https://x/cat.png","detail":"low"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"text":"Describe","type":"text"},{"image_url":{"detail":"low","url":"https://x/cat.png"},"type":"image_url"}]}]}`,
		},
		{
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":"https://x/dog.png"}}]}]}`,
		},
		{
			`{"model":"m","messages":[{"role":"user","name":"alice","content":"Hi"}]}`,
		},
		{
			`{"model":"m","messages":[{"role":"assistant","refusal":"I can't","content":null}]}`,
		},
	}
	seen := map[string]int{}
	for g, bodies := range groups {
		var want []byte
		for i, b := range bodies {
			r := chat(t, b)
			if i == 0 {
				want = r.Text
				if other, ok := seen[string(want)]; ok {
					t.Errorf("group %d has the same key as group %d: %q", g, other, want)
				}
				seen[string(want)] = g
			} else if !bytes.Equal(r.Text, want) {
				t.Errorf("group %d body %d: text %q, want %q", g, i, r.Text, want)
			}
		}
	}
}

func TestFields(t *testing.T) {
	for _, tc := range []struct {
		name, body, header string
		kind               Kind
		want               Request
	}{
		{"model and stream", `{"model":"lora-a","stream":true,"messages":[]}`, "", Chat, Request{Model: "lora-a", Stream: true}},
		{"stream null", `{"model":"m","stream":null,"messages":[]}`, "", Chat, Request{Model: "m"}},
		{"prompt_cache_key is the tenant", `{"prompt_cache_key":"t1","messages":[]}`, "", Chat, Request{Tenant: "t1", PromptCacheKey: "t1", TenantFields: true}},
		{"header wins", `{"prompt_cache_key":"t1","cache_salt":"s","messages":[]}`, "hdr", Chat, Request{Tenant: "hdr", PromptCacheKey: "t1", ClientSalt: "s", TenantFields: true}},
		{"cache_salt is the last claim", `{"cache_salt":"s","messages":[]}`, "", Chat, Request{Tenant: "s", ClientSalt: "s", TenantFields: true}},
		{"escaped key", `{"cache\u005fsalt":"s","messages":[]}`, "", Chat, Request{Tenant: "s", ClientSalt: "s", TenantFields: true}},
		{"cache_salt null is still a field", `{"cache_salt":null,"messages":[]}`, "", Chat, Request{TenantFields: true}},
		{"prompt string", `{"prompt":"hello"}`, "", Completions, Request{Text: []byte("hello"), WindowBytes: 5}},
		{"prompt list", `{"prompt":["a","b"]}`, "", Completions, Request{Text: []byte("a\x1eb\x1e"), WindowBytes: 4}},
		{"prompt tokens", `{"prompt":[1, 2,3]}`, "", Completions, Request{Text: []byte("1,2,3,"), WindowBytes: 6}},
		{"prompt token lists", `{"prompt":[[1],[2,3]]}`, "", Completions, Request{Text: []byte("1,\x1e2,3,\x1e"), WindowBytes: 8}},
		{"messages ignored on completions", `{"messages":[{"role":"user","content":"x"}],"prompt":"p"}`, "", Completions, Request{Text: []byte("p"), WindowBytes: 1}},
		{"repeated key: last wins", `{"prompt":"first","prompt":"second"}`, "", Completions, Request{Text: []byte("second"), WindowBytes: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OpenAI(tc.kind, []byte(tc.body), tc.header, lim)
			if err == nil {
				err = got.ClaimBodyTenant()
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.Text == nil {
				got.Text, got.WindowBytes = nil, 0
			}
			if got.Model != tc.want.Model || got.Stream != tc.want.Stream || got.Tenant != tc.want.Tenant ||
				got.PromptCacheKey != tc.want.PromptCacheKey || got.ClientSalt != tc.want.ClientSalt ||
				got.TenantFields != tc.want.TenantFields || !bytes.Equal(got.Text, tc.want.Text) || got.WindowBytes != tc.want.WindowBytes {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, header string
		syntax             bool
		param              string
		tenant             bool
	}{
		{"empty", ``, "", true, "", false},
		{"not an object", `[1,2]`, "", true, "", false},
		{"truncated", `{"messages":[{"role":"user","content":"hi`, "", true, "", false},
		{"trailing comma", `{"messages":[],}`, "", true, "", false},
		{"bad literal", `{"stream":tru}`, "", true, "", false},
		{"bad number", `{"temperature":01}`, "", true, "", false},
		{"bad escape", `{"model":"\x"}`, "", true, "", false},
		{"trailing data", `{"messages":[]} {}`, "", true, "", false},
		{"deep nesting", `{"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, "", true, "", false},
		{"model not a string", `{"model":7,"messages":[]}`, "", false, "model", false},
		{"messages not an array", `{"messages":"hi"}`, "", false, "messages", false},
		{"stream not a bool", `{"stream":"yes","messages":[]}`, "", false, "stream", false},
		{"tenant header too long", `{"messages":[]}`, strings.Repeat("x", 65), false, "", true},
		{"tenant header not printable", `{"messages":[]}`, "a\tb", false, "", true},
		{"prompt_cache_key not ASCII", `{"prompt_cache_key":"é","messages":[]}`, "", false, "prompt_cache_key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OpenAI(Chat, []byte(tc.body), tc.header, lim)
			if err == nil {
				err = r.ClaimBodyTenant()
			}
			if err == nil {
				t.Fatal("accepted")
			}
			var se *SyntaxError
			if errors.As(err, &se) != tc.syntax {
				t.Fatalf("syntax error = %v, want %v (%v)", !tc.syntax, tc.syntax, err)
			}
			if Param(err) != tc.param {
				t.Fatalf("param %q, want %q (%v)", Param(err), tc.param, err)
			}
			if errors.Is(err, ErrBadTenant) != tc.tenant {
				t.Fatalf("bad tenant = %v (%v)", !tc.tenant, err)
			}
		})
	}
}

func TestWindowAndLookahead(t *testing.T) {
	small := Limits{Window: 10, Lookahead: 5}
	// The window is characters ("é" is two bytes), the lookahead bytes.
	body := `{"prompt":"` + strings.Repeat("é", 100) + `"}`
	r, err := OpenAI(Completions, []byte(body), "", small)
	if err != nil {
		t.Fatal(err)
	}
	if utf8.RuneCount(r.Text[:r.WindowBytes]) != 10 || r.WindowBytes != 20 || len(r.Text) != 25 {
		t.Fatalf("window %d bytes (%d runes), text %d bytes; want 10 runes in 20 bytes, 25 bytes",
			r.WindowBytes, utf8.RuneCount(r.Text[:r.WindowBytes]), len(r.Text))
	}
	// Escaped text is decoded before counting.
	body = `{"prompt":"` + strings.Repeat(`\u00e9`, 100) + `"}`
	r2, _ := OpenAI(Completions, []byte(body), "", small)
	if !bytes.Equal(r.Text, r2.Text) || r2.WindowBytes != 20 {
		t.Fatalf("escaped: %q/%d, want %q/20", r2.Text, r2.WindowBytes, r.Text)
	}
	// Invocations: bytes of the raw body.
	inv, _ := Invocations([]byte(`{"inputs":"`+strings.Repeat("é", 100)+`"}`), "", small)
	if len(inv.Text) != 15 || inv.WindowBytes != 10 || string(inv.Text[:10]) != `{"inputs":` {
		t.Fatalf("invocations: %d bytes, window %d", len(inv.Text), inv.WindowBytes)
	}
}

// TestWindowCountsEveryCharacter cuts text mixing ASCII runs, two-, three-
// and four-byte characters, invalid bytes and a truncated character at
// every window size, and compares the window with one counted a character
// at a time (an invalid byte counting as one).
func TestWindowCountsEveryCharacter(t *testing.T) {
	text := "ab" + strings.Repeat("x", 40) + "é中😀\xff\xe4\xb8" + strings.Repeat("y", 33) + "中é" + "\xf0\x9f" + "z"
	body := []byte(`{"prompt":"` + text + `"}`)
	for window := 0; window <= utf8.RuneCountInString(text)+1; window++ {
		want := 0
		for runes := 0; want < len(text) && runes < window; runes++ {
			_, w := utf8.DecodeRuneInString(text[want:])
			want += w
		}
		r, err := OpenAI(Completions, body, "", Limits{Window: window, Lookahead: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.WindowBytes != want || string(r.Text) != text[:min(len(text), want+3)] {
			t.Fatalf("window %d: %d bytes, text %q; want %d bytes", window, r.WindowBytes, r.Text, want)
		}
	}
}

func TestHugeBody(t *testing.T) {
	big := strings.Repeat("lorem ipsum dolor sit amet ", 40000) // ~1 MiB
	body := `{"model":"m","messages":[{"role":"system","content":"` + big + `"},{"role":"user","content":"` + big + `"}],"stream":true}`
	r, err := OpenAI(Chat, []byte(body), "", lim)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Text) != lim.Window+lim.Lookahead || r.WindowBytes != lim.Window || !r.Stream {
		t.Fatalf("text %d bytes, window %d, stream %v", len(r.Text), r.WindowBytes, r.Stream)
	}
}

func TestNonUTF8(t *testing.T) {
	body := []byte("{\"prompt\":\"caf\xe9 \xff\xfe end\"}")
	a, err := OpenAI(Completions, body, "", lim)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := OpenAI(Completions, body, "", lim)
	if !bytes.Equal(a.Text, b.Text) || len(a.Text) == 0 {
		t.Fatalf("unstable or empty text %q / %q", a.Text, b.Text)
	}
	// Each invalid byte counts as one character of the window.
	r, _ := OpenAI(Completions, body, "", Limits{Window: 5, Lookahead: 0})
	if string(r.Text) != "caf\xe9 " {
		t.Fatalf("window %q", r.Text)
	}
}

func TestSaltedBody(t *testing.T) {
	for _, tc := range []struct{ name, body, salt string }{
		{"plain", `{"model":"m","messages":[]}`, `ten"ant`},
		{"empty object", ` { } `, "s"},
		{"newline", "{\n\"prompt\":\"x\"}", "s"},
		{"client salt replaced", `{"cache_salt":"mine","prompt":"x"}`, "s"},
		{"null salt replaced", `{"prompt":"x", "cache_salt" : null }`, "s"},
		{"duplicates and escaped keys", `{"cache_salt":"a","prompt":"x","cache\u005fsalt":"b","prompt_cache_key":"k"}`, "s"},
		{"only tenant fields", `{"cache_salt":"a","prompt_cache_key":"k"}`, "s"},
		{"no salt strips", `{"cache_salt":"a","prompt":"x","prompt_cache_key":"k"}`, ""},
		{"no salt, nothing to strip", `{"prompt":"x"}`, ""},
		{"nested cache_salt kept", `{"prompt":"x","extra_body":{"cache_salt":"inner"}}`, "s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OpenAI(Completions, []byte(tc.body), "", lim)
			if err != nil {
				t.Fatal(err)
			}
			pieces, err := SaltedBody([]byte(tc.body), tc.salt, r.TenantFields)
			if err != nil {
				t.Fatal(err)
			}
			out := bytes.Join(pieces, nil)
			if !json.Valid(out) {
				t.Fatalf("%s → invalid %s", tc.body, out)
			}
			// Count top-level keys as vLLM's parser would see them.
			keys := topLevelKeys(t, out)
			want := 0
			if tc.salt != "" {
				want = 1
			}
			if keys["cache_salt"] != want || keys["prompt_cache_key"] != 0 {
				t.Fatalf("%s → %s: keys %v", tc.body, out, keys)
			}
			var v map[string]any
			_ = json.Unmarshal(out, &v)
			if tc.salt != "" && v["cache_salt"] != tc.salt {
				t.Fatalf("%s → %s", tc.body, out)
			}
			orig := topLevelKeys(t, []byte(tc.body))
			for k, n := range orig {
				if k != "cache_salt" && k != "prompt_cache_key" && keys[k] != n {
					t.Fatalf("%s → %s: key %q lost", tc.body, out, k)
				}
			}
		})
	}
}

// topLevelKeys counts the top-level keys of a JSON object, repeats
// included (which a map would hide), decoded.
func topLevelKeys(t *testing.T, body []byte) map[string]int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		n[k.(string)]++
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestInvocationsTenant(t *testing.T) {
	if _, err := Invocations([]byte("{}"), strings.Repeat("a", 65), lim); !errors.Is(err, ErrBadTenant) {
		t.Fatalf("err %v", err)
	}
	r, err := Invocations([]byte("{}"), "t", lim)
	if err != nil || r.Tenant != "t" {
		t.Fatalf("%+v %v", r, err)
	}
	// The body's claims and stream flag are read as on the OpenAI paths.
	r, err = Invocations([]byte(`{"prompt":"hi","stream":true,"prompt_cache_key":"k","cache_salt":"s"}`), "", lim)
	if err != nil || !r.Stream || r.PromptCacheKey != "k" || r.ClientSalt != "s" || !r.TenantFields {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestRefusesWhatPythonAloneReads: vLLM parses bodies with Python's json,
// which reads more than JSON. The router reads a body after a UTF-8 byte
// order mark as vLLM does, and refuses the rest by name, on every path.
func TestRefusesWhatPythonAloneReads(t *testing.T) {
	utf16LE := func(s string) []byte {
		var b []byte
		for _, c := range s {
			b = append(b, byte(c), 0)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		body []byte
		want string // in the error; "" to be read
	}{
		{"UTF-8 BOM", []byte("\xef\xbb\xbf{\"prompt\":\"hi\",\"cache_salt\":\"s\"}"), ""},
		{"NaN", []byte(`{"prompt":"hi","temperature":NaN}`), "NaN and Infinity"},
		{"Infinity", []byte(`{"prompt":"hi","top_p":Infinity}`), "NaN and Infinity"},
		{"-Infinity", []byte(`{"prompt":"hi","top_p":-Infinity}`), "NaN and Infinity"},
		{"UTF-16-LE", utf16LE(`{"prompt":"hi"}`), "UTF-16 or UTF-32"},
		{"UTF-16-BE with a BOM", append([]byte{0xfe, 0xff, 0, '{'}, 0, '}'), "UTF-16 or UTF-32"},
		{"UTF-32-LE", []byte{'{', 0, 0, 0, '}', 0, 0, 0}, "UTF-16 or UTF-32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, read := range map[string]func() (Request, error){
				"invocations": func() (Request, error) { return Invocations(tc.body, "", lim) },
				"completions": func() (Request, error) { return OpenAI(Completions, tc.body, "", lim) },
			} {
				r, err := read()
				switch {
				case tc.want == "" && (err != nil || r.ClientSalt != "s"):
					t.Errorf("%s: %+v %v", name, r, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
				}
			}
			if _, err := SaltedBody(tc.body, "salt", true); (err == nil) != (tc.want == "") {
				t.Errorf("SaltedBody: %v", err)
			}
		})
	}
}

func TestPromptBytes(t *testing.T) {
	big := strings.Repeat("lorem ipsum ", 100000) // far past the window
	for _, tc := range []struct {
		name string
		kind Kind
		body string
		want int
	}{
		{"chat strings", Chat, `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`, 11},
		{"escapes count decoded", Chat, `{"messages":[{"role":"user","content":"\u4e2d\n\ud83d\ude00\ud83d"}]}`, 3 + 1 + 4 + 3},
		{"raw UTF-8", Chat, `{"messages":[{"role":"user","content":"中é"}]}`, 5},
		{"text parts", Chat, `{"messages":[{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":"https://x/cat.png"}},{"text":" it","type":"text"}]}]}`, 11},
		{"roles, names, tool calls and refusals are not content", Chat, `{"messages":[{"role":"assistant","name":"bob","refusal":"no","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`, 5},
		{"repeated content: the last counts", Chat, `{"messages":[{"role":"user","content":"first","content":[{"type":"text","text":"second"}]}]}`, 6},
		{"repeated messages: the last count", Chat, `{"messages":[{"role":"user","content":"first"}],"messages":[{"role":"user","content":"2nd"}]}`, 3},
		{"past the window", Chat, `{"messages":[{"role":"system","content":"` + big + `"},{"role":"user","content":[{"type":"text","text":"` + big + `"}]},{"role":"user","content":"end"}]}`, 2*len(big) + 3},
		{"prompt string", Completions, `{"prompt":"hello\u00e9"}`, 7},
		{"prompt strings", Completions, `{"prompt":["a","bc"]}`, 3},
		{"token ids count nothing", Completions, `{"prompt":[[1,2],[3]]}`, 0},
		{"chat's messages on completions", Completions, `{"messages":[{"role":"user","content":"x"}],"prompt":"p"}`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OpenAI(tc.kind, []byte(tc.body), "", lim)
			if err != nil {
				t.Fatal(err)
			}
			if r.PromptBytes != tc.want {
				t.Fatalf("PromptBytes %d, want %d", r.PromptBytes, tc.want)
			}
		})
	}
	inv := `{"inputs":"` + big + `"}`
	r, _ := Invocations([]byte(inv), "", lim)
	if r.PromptBytes != len(inv) {
		t.Fatalf("invocations: PromptBytes %d, want %d", r.PromptBytes, len(inv))
	}
}

func TestTokenIDOfTheWrongType(t *testing.T) {
	// Valid JSON, so a field error rather than a syntax error.
	for _, body := range []string{`{"prompt":[1,{}]}`, `{"prompt":[[1],["a"]]}`, `{"prompt":[1.5]}`} {
		_, err := OpenAI(Completions, []byte(body), "", lim)
		var se *SyntaxError
		if err == nil || errors.As(err, &se) || Param(err) != "prompt" {
			t.Errorf("%s: %v, want an error on prompt", body, err)
		}
	}
}
