package vllmsim

import (
	"net/http"
	"testing"
)

func TestResetPrefixCacheEmptiesTheCache(t *testing.T) {
	s := startServer(t, Config{})
	prompt := text("abcd", 63)
	body := map[string]any{"prompt": prompt, "max_tokens": 4}
	completion(t, s, body)
	if got := completion(t, s, body).Usage.PromptTokensDetails.CachedTokens; got != 48 {
		t.Fatalf("before reset: cached %d, want 48", got)
	}
	resp, err := http.Post(s.URL()+"/reset_prefix_cache", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reset: %s", resp.Status)
	}
	if got := completion(t, s, body).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("after reset: cached %d, want 0", got)
	}
	if got := completion(t, s, body).Usage.PromptTokensDetails.CachedTokens; got != 48 {
		t.Fatalf("after refill: cached %d, want 48", got)
	}
}
