package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// budget is the router-wide bound on buffered request bodies. The router
// must hold each body whole (to read its routing key and to resend it on a
// retry), so without a bound enough concurrent large uploads grow the
// process until the kernel kills it, taking every stream with it. Past the
// bound a new request is refused with 503 instead.
type budget struct {
	limit int64
	used  atomic.Int64
}

// reserve takes n bytes, or reports false without taking any.
func (b *budget) reserve(n int64) bool {
	for {
		cur := b.used.Load()
		if cur+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (b *budget) release(n int64) { b.used.Add(-n) }

// Why readGrowing stops.
var (
	errBodyTooLarge = errors.New("request body too large")
	errOverBudget   = errors.New("router buffer budget exhausted")
)

// chunkedStep is how much budget a body of unknown length reserves at a
// time as it grows.
const chunkedStep = 64 << 10

// readBody reads the whole request body within MaxBodyBytes, the body read
// deadline and the buffer budget. It returns the body and how many budget
// bytes it holds, to release once the request is done. A declared length
// over the limit, or one that does not fit the budget, is refused before
// any byte is read.
func (r *Router) readBody(w http.ResponseWriter, req *http.Request) (body []byte, held int64, refused *Refusal) {
	switch {
	case req.ContentLength > r.opts.MaxBodyBytes:
		return nil, 0, r.bodyTooLarge()
	case req.ContentLength >= 0 && !r.budget.reserve(req.ContentLength):
		return nil, 0, overBudget()
	}
	held = max(req.ContentLength, 0)
	// The deadline covers the whole body; it is lifted afterwards so a long
	// stream is not cut by it. ErrNotSupported (a writer without a
	// connection, as in some tests) leaves the body unbounded in time.
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(r.opts.BodyReadTimeout)); err == nil {
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	src := http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes)
	var err error
	if req.ContentLength >= 0 {
		body = make([]byte, req.ContentLength)
		_, err = io.ReadFull(src, body)
	} else {
		body, err = r.readGrowing(src, &held)
	}
	if err == nil {
		return body, held, nil
	}
	r.budget.release(held)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig), errors.Is(err, errBodyTooLarge):
		return nil, 0, r.bodyTooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, 0, r.BodyTimedOut()
	case errors.Is(err, errOverBudget):
		return nil, 0, overBudget()
	}
	return nil, 0, invalid(http.StatusBadRequest, "", "", "could not read the request body")
}

// readGrowing reads a body of unknown length (chunked), reserving budget in
// steps ahead of the buffer's growth; *held tracks what it reserved.
func (r *Router) readGrowing(src io.Reader, held *int64) ([]byte, error) {
	var body []byte
	for {
		if len(body) == cap(body) {
			next := min(max(2*int64(cap(body)), chunkedStep), r.opts.MaxBodyBytes+1)
			if next <= int64(cap(body)) {
				return nil, errBodyTooLarge // MaxBytesReader reports first; a guard against a loop
			}
			if next > *held {
				if !r.budget.reserve(next - *held) {
					return nil, errOverBudget
				}
				*held = next
			}
			grown := make([]byte, len(body), next)
			copy(grown, body)
			body = grown
		}
		n, err := src.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			return body, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// HoldBody is the budget a body held by a caller that reads it itself
// (the Endpoint Picker Protocol, which receives it in chunks) takes as it
// grows to n bytes from held: the new hold, or the refusal of a body over
// MaxBodyBytes (413) or over the budget, which is shed with 429 as the
// protocol asks (the proxy answers 503 with Retry-After, which its own
// clients retry alike). Release gives the hold back.
func (r *Router) HoldBody(held, n int64) (int64, *Refusal) {
	if n > r.opts.MaxBodyBytes {
		return held, r.bodyTooLarge()
	}
	if n > held {
		if !r.budget.reserve(n - held) {
			return held, refuse(http.StatusTooManyRequests, "rate_limit_exceeded", "router_overloaded", "", overloadedMsg, 1)
		}
		held = n
	}
	return held, nil
}

// Release returns bytes taken by HoldBody.
func (r *Router) Release(n int64) { r.budget.release(n) }

func (r *Router) bodyTooLarge() *Refusal {
	return invalid(http.StatusRequestEntityTooLarge, "request_too_large", "", fmt.Sprintf("request body exceeds %d bytes", r.opts.MaxBodyBytes))
}

// BodyTimedOut is the refusal of a body that took longer than
// BodyReadTimeout.
func (r *Router) BodyTimedOut() *Refusal {
	return invalid(http.StatusRequestTimeout, "request_timeout", "", fmt.Sprintf("the request body did not arrive within %s", r.opts.BodyReadTimeout))
}

func overBudget() *Refusal {
	return unavailable(http.StatusServiceUnavailable, "router_overloaded", overloadedMsg, 1)
}

const overloadedMsg = "the router is holding as many request bodies as it may; retry shortly"
