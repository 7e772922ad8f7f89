package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// errHeaderTimeout is the cancellation cause when a backend has not begun
// its response (sent its headers) within headerTimeout of being sent the
// request: a backend that accepts connections and then never answers
// would otherwise hold each request, and its client, for ever.
var errHeaderTimeout = errors.New("backend sent no response headers in time")

// headerTimeout is how long a backend may take to send its response
// headers once it has the request. vLLM sends a stream's headers before
// its prefill, so a stream gets the idle timeout, the same silence it may
// keep between two chunks; a response that is not streamed has its
// headers only with the whole completion, so it gets the longer
// ResponseHeaderTimeout.
func (r *Router) headerTimeout(stream bool) time.Duration {
	if stream {
		return r.opts.StreamIdleTimeout
	}
	return r.opts.ResponseHeaderTimeout
}

// headerDeadline cancels one attempt's route with errHeaderTimeout unless
// stopped in time. It is armed when the attempt has its connection, which
// bounds a backend that never reads the request too, and armed again once
// the request is written whole, from which the limit counts. The
// transport calls the trace hooks from its own goroutines.
type headerDeadline struct {
	after time.Duration
	fire  func()

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func newHeaderDeadline(rt *route, after time.Duration) *headerDeadline {
	d := &headerDeadline{after: after}
	d.fire = func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.stopped { // the headers came as it fired
			rt.cancel(errHeaderTimeout)
		}
	}
	return d
}

func (d *headerDeadline) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.stopped:
	case d.timer == nil:
		d.timer = time.AfterFunc(d.after, d.fire)
	default:
		d.timer.Reset(d.after)
	}
}

// stop ends the deadline: the attempt has its response, or has failed.
func (d *headerDeadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// headerTimedOut answers a request whose backend never sent its headers
// with 504 and an OpenAI-style error; it reports whether that was so. The
// backend's failure is booked in settle.
func headerTimedOut(w http.ResponseWriter, rt *route) bool {
	if !errors.Is(context.Cause(rt.upstream), errHeaderTimeout) {
		return false
	}
	unavailable(http.StatusGatewayTimeout, "upstream_timeout", "the model server did not answer in time", 0).write(w)
	return true
}
