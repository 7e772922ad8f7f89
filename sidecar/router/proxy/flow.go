package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/picker"
)

// PriorityHeader lets a request lower its priority under flow control
// (never above its tenant's, which the picker enforces).
const PriorityHeader = "X-Warmroute-Priority"

// ObjectiveHeader names the request's InferenceObjective. The Gateway API
// Inference Extension's gateway sets it, so it matters in InferencePool
// mode; a client of the proxy may send it too, and can only lower its own
// priority with it, as with PriorityHeader.
const ObjectiveHeader = "X-Gateway-Inference-Objective"

// sender is who sends a request, for flow control: the tenant the pipeline
// identified and the priority it asks for, the lower of PriorityHeader's
// and that of the InferenceObjective it names (fc.Objectives). An
// objective the document does not list asks for nothing: the gateway may
// route objectives of other pools, or ones without a priority.
func sender(h http.Header, tenant string, fc *routing.FlowControl) (picker.Sender, *Refusal) {
	s := picker.Sender{Tenant: tenant}
	if fc != nil {
		if prio, ok := fc.Objectives[h.Get(ObjectiveHeader)]; ok {
			s.Priority, s.Lowers = prio, true
		}
	}
	v := h.Get(PriorityHeader)
	if v == "" {
		return s, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
		return s, invalid(http.StatusBadRequest, "invalid_priority", PriorityHeader,
			fmt.Sprintf("%s must be an integer, got %q", PriorityHeader, truncate(v, maxEchoBytes)))
	}
	if !s.Lowers || n < s.Priority {
		s.Priority, s.Lowers = n, true
	}
	return s, nil
}

// flowRefusal is the answer to a request flow control refused: 429 with
// OpenAI's x-ratelimit-* headers for a rate limit, 429 or 503 with
// Retry-After for the queue; nil for any other error.
func flowRefusal(err error) *Refusal {
	var lim *flow.Limited
	var ref *flow.Refusal
	switch {
	case errors.As(err, &lim):
		f := refuse(http.StatusTooManyRequests, string(lim.Reason), "rate_limit_exceeded", "", lim.Error(), retrySeconds(lim.RetryAfter))
		for unit, w := range map[string]flow.Window{"requests": lim.Requests, "tokens": lim.Tokens} {
			if w.Limit > 0 {
				f.Header.Set("x-ratelimit-limit-"+unit, strconv.FormatInt(w.Limit, 10))
				f.Header.Set("x-ratelimit-remaining-"+unit, strconv.FormatInt(max(w.Remaining, 0), 10))
				f.Header.Set("x-ratelimit-reset-"+unit, w.Reset.Round(time.Millisecond).String())
			}
		}
		return f
	case errors.As(err, &ref):
		code := map[flow.Reason]string{flow.ReasonTenantQueueFull: "tenant_queue_full", flow.ReasonNotQueued: "not_queued",
			flow.ReasonPressure: "queue_full", flow.ReasonDeadline: "queue_timeout"}[ref.Reason]
		if ref.Reason.Status() == http.StatusTooManyRequests {
			return refuse(http.StatusTooManyRequests, "requests", code, "", ref.Error(), retrySeconds(ref.RetryAfter))
		}
		return unavailable(ref.Reason.Status(), code, ref.Error(), retrySeconds(ref.RetryAfter))
	}
	return nil
}

// retrySeconds is a Retry-After in whole seconds, at least 1.
func retrySeconds(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds())), 1)
}

// usageTail keeps the end of a response, where vLLM puts its usage (the
// last object of a JSON answer, the last event before [DONE] of a stream
// asked to include it), to settle token rate limits with what the request
// really used.
type usageTail struct {
	buf []byte
}

// usageTailBytes holds a usage object with room to spare.
const usageTailBytes = 512

func (u *usageTail) write(p []byte) {
	if len(p) >= usageTailBytes {
		u.buf = append(u.buf[:0], p[len(p)-usageTailBytes:]...)
		return
	}
	if over := len(u.buf) + len(p) - usageTailBytes; over > 0 {
		u.buf = u.buf[:copy(u.buf, u.buf[over:])]
	}
	u.buf = append(u.buf, p...)
}

// tokens is the last usage.total_tokens seen, or flow.Unknown.
func (u *usageTail) tokens() int64 {
	const key = `"total_tokens":`
	i := bytes.LastIndex(u.buf, []byte(key))
	if i < 0 {
		return flow.Unknown
	}
	rest := bytes.TrimLeft(u.buf[i+len(key):], " ")
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil || end == len(rest) {
		return flow.Unknown // cut off: the number may go on
	}
	return n
}
