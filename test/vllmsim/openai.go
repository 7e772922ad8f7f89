package vllmsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// generateRequest holds the fields of an OpenAI chat or completions request
// that the simulator acts on; the rest are accepted and ignored.
type generateRequest struct {
	Model               string          `json:"model"`
	Messages            []rawMessage    `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	CacheSalt string `json:"cache_salt"`
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatMessage is a message as the chat template sees it.
type chatMessage struct {
	role, text string
}

// messages flattens each message's content, a string or an array of parts
// of which the text parts count, into the text the template renders.
func (r generateRequest) messages() ([]chatMessage, error) {
	if len(r.Messages) == 0 {
		return nil, errors.New("'messages' must contain at least one message")
	}
	out := make([]chatMessage, len(r.Messages))
	for i, m := range r.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d]: 'role' is required", i)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		out[i] = chatMessage{role: m.Role, text: text}
	}
	return out, nil
}

func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// prompts tokenizes a completions prompt: a string, a list of strings (a
// batch, one choice each), a list of token ids, or a list of those.
func (r generateRequest) prompts(t tokenizer) ([][]uint64, error) {
	var one string
	if err := json.Unmarshal(r.Prompt, &one); err == nil {
		return [][]uint64{t.completion(one)}, nil
	}
	var texts []string
	if err := json.Unmarshal(r.Prompt, &texts); err == nil && len(texts) > 0 {
		out := make([][]uint64, len(texts))
		for i, p := range texts {
			out[i] = t.completion(p)
		}
		return out, nil
	}
	var ids []uint64
	if err := json.Unmarshal(r.Prompt, &ids); err == nil && len(ids) > 0 {
		return [][]uint64{ids}, nil
	}
	var batches [][]uint64
	if err := json.Unmarshal(r.Prompt, &batches); err == nil && len(batches) > 0 {
		for _, b := range batches {
			if len(b) == 0 {
				return nil, errors.New("'prompt' must not contain an empty token list")
			}
		}
		return batches, nil
	}
	return nil, errors.New("'prompt' must be a string, a list of strings, or token ids")
}

// maxTokens applies the OpenAI precedence: max_completion_tokens, then
// max_tokens, then the server default.
func (r generateRequest) maxTokens(def int) (int, error) {
	n := def
	switch {
	case r.MaxCompletionTokens != nil:
		n = *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		n = *r.MaxTokens
	}
	if n < 1 {
		return 0, fmt.Errorf("max_tokens must be at least 1, got %d", n)
	}
	return n, nil
}

func (r generateRequest) includeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatMessageOut struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type choice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatMessageOut `json:"delta,omitempty"`
	Text         *string         `json:"text,omitempty"`
	Logprobs     any             `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// completionResponse is a chat.completion, chat.completion.chunk or
// text_completion object.
type completionResponse struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

// apiError is vLLM's error body: {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, code int, typ, format string, args ...any) {
	var e apiError
	e.Error.Message = fmt.Sprintf(format, args...)
	e.Error.Type = typ
	e.Error.Code = code
	writeJSON(w, code, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len,omitempty"`
	Permission  []any   `json:"permission"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}
