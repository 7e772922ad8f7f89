package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// maxErrorMessage bounds an error message, which may quote client input (a
// model name, a path): an error body must never grow with the request.
const maxErrorMessage = 1024

// maxEchoBytes bounds a single piece of client input quoted in a message.
const maxEchoBytes = 256

// truncate cuts s to at most n bytes on a UTF-8 boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// apiError is the OpenAI error body, which OpenAI clients parse and show:
// {"error":{"message","type","param","code"}}.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeError answers with an OpenAI-style error. retryAfter > 0 adds a
// Retry-After header (seconds), which clients honour on 503.
func writeError(w http.ResponseWriter, status int, typ, code, param, msg string, retryAfter int) {
	e := apiError{Message: truncate(msg, maxErrorMessage), Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	body, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{e})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
