package proxy

import (
	"errors"
	"sync"
	"time"
)

// errHeaderTimeout is the cancellation cause when a backend has not sent
// its response headers within headerTimeout of being sent the request: a
// backend that accepts connections and then never answers would otherwise
// hold each request, and its client, for ever.
var errHeaderTimeout = errors.New("backend sent no response headers in time")

// headerTimeout is how long a backend may take to send its response
// headers once it has the request. vLLM sends a stream's headers before
// its prefill, so a stream gets the idle timeout, the silence it may keep
// between two chunks; a response that is not streamed has its headers only
// with the whole completion.
func (r *Router) headerTimeout(stream bool) time.Duration {
	if stream {
		return r.opts.StreamIdleTimeout
	}
	return r.opts.ResponseHeaderTimeout
}

// headerDeadline cancels one attempt's route with errHeaderTimeout unless
// stopped in time. It is armed when the attempt has its connection, which
// bounds a backend that never reads the request too, and again once the
// request is written whole, from which the limit counts. The transport
// calls the trace hooks from its own goroutines; stopped keeps a timer
// firing as the headers come from cancelling a good response.
type headerDeadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func (d *headerDeadline) arm(rt *route, after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = time.AfterFunc(after, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.stopped {
			rt.cancel(errHeaderTimeout)
		}
	})
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
