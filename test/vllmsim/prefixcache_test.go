package vllmsim

import (
	"context"
	"fmt"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestPrefixCacheMatchesServer replays one request stream, multi-turn
// conversations with evictions included, through a server and through
// PrefixCache: every request must hit the same number of tokens.
func TestPrefixCacheMatchesServer(t *testing.T) {
	const cacheTokens = 2048
	s := startServer(t, Config{CacheTokens: cacheTokens})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	offline := NewPrefixCache(cacheTokens, 0, 0)

	conversations := make([][]Message, 4)
	for turn := range 4 {
		for c := range conversations {
			conversations[c] = append(conversations[c], Message{Role: "user", Content: text(fmt.Sprint(c, turn), 50+10*c)})
			var params []openai.ChatCompletionMessageParamUnion
			for _, m := range conversations[c] {
				if m.Role == "user" {
					params = append(params, openai.UserMessage(m.Content))
				} else {
					params = append(params, openai.AssistantMessage(m.Content))
				}
			}
			salt := fmt.Sprint("tenant", c%2)
			resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: testModel, Messages: params, MaxTokens: openai.Int(20),
			}, option.WithJSONSet("cache_salt", salt))
			if err != nil {
				t.Fatal(err)
			}
			prompt, cached := offline.Chat("", salt, conversations[c], 20)
			if int64(prompt) != resp.Usage.PromptTokens || int64(cached) != resp.Usage.PromptTokensDetails.CachedTokens {
				t.Errorf("conversation %d turn %d: server %d/%d tokens cached, offline %d/%d",
					c, turn, resp.Usage.PromptTokensDetails.CachedTokens, resp.Usage.PromptTokens, cached, prompt)
			}
			conversations[c] = append(conversations[c], Message{Role: "assistant", Content: resp.Choices[0].Message.Content})
		}
	}
	if st := s.Stats(); st.PrefixCacheHits != offline.Hits() || st.PrefixCacheQueries != offline.Queries() {
		t.Errorf("server hit %d of %d tokens, offline %d of %d", st.PrefixCacheHits, st.PrefixCacheQueries, offline.Hits(), offline.Queries())
	}
	if offline.Hits() == 0 {
		t.Error("no hits at all: the test exercises nothing")
	}
}
