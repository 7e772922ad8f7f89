package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

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
	e := apiError{Message: msg, Type: typ}
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
