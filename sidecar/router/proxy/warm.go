package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/picker"
)

// Warm copies (policy/warm.go): when a decision names a joining instance
// to warm, the router sends it a one-token copy of the request, so that
// its cache holds the prompt's prefix before the key's next request moves
// there. The copy is built and sent in the background, never delaying the
// user's request, and is counted only in warm_requests_total and
// warm_prompt_tokens_total.

// warmTimeout bounds a warm copy: one prefill of the longest prompt a
// model serves (128k tokens at a few thousand tokens a second, under a
// minute), the copy then given up and reported unanswered so that the
// joiner's slot for copies frees.
const warmTimeout = time.Minute

// warm sends choice's warm copy, if it has one, of the request whose
// (salted) body is pieces, on path, with the Authorization the request
// itself is forwarded with.
func (r *Router) warm(choice *picker.Ticket, path string, pieces [][]byte, h http.Header) {
	in, tokens, ok := choice.WarmTarget()
	if !ok {
		return
	}
	header := http.Header{"Authorization": h.Values("Authorization")}
	r.authorize(header)
	header.Set("Content-Type", "application/json")
	// The body is copied out of the pooled buffer, which goes back to the
	// pool when the request ends; parsing and rewriting it (as long as the
	// prompt) is left to the goroutine.
	raw := bytes.Join(pieces, nil)
	go func() {
		ok := false
		defer func() {
			result := "error"
			if ok {
				result = "ok"
			}
			r.m.WarmRequests.WithLabelValues(result).Inc()
			choice.Warmed(ok)
		}()
		body, err := warmBody(raw)
		if err != nil {
			return
		}
		r.m.WarmPromptTokens.Add(float64(tokens))
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+in.Address+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header = header
		resp, err := r.upstream.RoundTrip(req)
		if err != nil {
			r.opts.Log.V(1).Info("warm copy failed", "backend", in.ID, "error", err.Error())
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		ok = resp.StatusCode < 300
	}()
}

// warmBody is the request body with one output token, unstreamed: the
// same model, messages or prompt and cache salt, so the instance prefills
// and caches the same prefix, and answers after one decode step.
func warmBody(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	for _, k := range []string{"stream_options", "max_completion_tokens", "n", "best_of", "logprobs", "top_logprobs", "prompt_logprobs"} {
		delete(fields, k)
	}
	fields["max_tokens"] = json.RawMessage("1")
	fields["stream"] = json.RawMessage("false")
	return json.Marshal(fields)
}
