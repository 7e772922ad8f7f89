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

// Refusal is the answer to a request the router will not place: status,
// headers (Content-Type, WWW-Authenticate on a 401, Retry-After when a
// retry may succeed) and an OpenAI-style body. The proxy writes it as its
// response; the Endpoint Picker Protocol sends it as the gateway's
// immediate response.
type Refusal struct {
	Status int
	Header http.Header
	Body   []byte
}

// apiError is the OpenAI error body, which OpenAI clients parse and show:
// {"error":{"message","type","param","code"}}.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// refuse builds a refusal; retryAfter > 0 adds a Retry-After header
// (seconds), which clients honour on 503.
func refuse(status int, typ, code, param, msg string, retryAfter int) *Refusal {
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
	h := http.Header{"Content-Type": {"application/json"}}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	return &Refusal{Status: status, Header: h, Body: body}
}

func invalid(status int, code, param, msg string) *Refusal {
	return refuse(status, "invalid_request_error", code, param, msg, 0)
}

func unavailable(status int, code, msg string, retryAfter int) *Refusal {
	return refuse(status, "service_unavailable", code, "", msg, retryAfter)
}

// write answers the request with the refusal.
func (f *Refusal) write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range f.Header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(f.Body)))
	w.WriteHeader(f.Status)
	_, _ = w.Write(f.Body)
}
