package proxy

import (
	"bytes"
	"errors"
	"io"
	"time"
)

// errStreamIdle is the cancellation cause when a backend sends nothing for
// StreamIdleTimeout in the middle of a response.
var errStreamIdle = errors.New("backend sent nothing within the stream idle timeout")

// maxEventScan bounds how much of a stream is held while looking for the
// first content event; an event line longer than this carries content.
const maxEventScan = 8 << 10

// responseBody wraps a backend's response body as ReverseProxy copies it to
// the client, without buffering it: each chunk re-arms the idle timer,
// stream chunks are looked at until the first content event (time to
// first token), and the end or failure of the read is recorded for the
// request's outcome.
type responseBody struct {
	io.ReadCloser
	rt   *route
	idle *time.Timer
	// sse: a text/event-stream response, where the first token is an event.
	sse     bool
	token   bool   // the first token has passed
	pending []byte // an unfinished line while looking for the first token
	eof     bool
	readErr error
}

func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.idle.Reset(b.rt.router.opts.StreamIdleTimeout)
		if b.sse && !b.token && b.scan(p[:n]) {
			// The first event with output: the instance has finished the
			// prefill, so the prompt leaves its prefill load (a response
			// that is not streamed stays counted as prefill to its end).
			b.token = true
			b.rt.Prefilled()
			b.rt.router.m.TimeToFirstToken.Observe(time.Since(b.rt.start).Seconds())
		}
		b.rt.Response(p[:n])
	}
	switch {
	case err == io.EOF:
		b.eof = true
		b.idle.Stop()
		if !b.sse {
			b.rt.router.m.TimeToFullResponse.Observe(time.Since(b.rt.start).Seconds())
		}
	case err != nil && b.readErr == nil:
		b.readErr = err
	}
	return n, err
}

// scan looks for the first data event that carries output, line by line;
// it reports true once one has passed.
func (b *responseBody) scan(chunk []byte) bool {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			b.pending = append(b.pending, chunk...)
			// A line this long without an end is no empty delta.
			return len(b.pending) > maxEventScan
		}
		line := chunk[:i]
		if len(b.pending) > 0 {
			line = append(b.pending, line...)
			b.pending = b.pending[:0]
		}
		chunk = chunk[i+1:]
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok && carriesOutput(bytes.TrimSpace(data)) {
			b.pending = nil
			return true
		}
	}
	return false
}

// carriesOutput tells an event with output from the empty ones vLLM also
// sends (the role-only first delta, "[DONE]", a usage-only chunk): cheap
// substring checks on vLLM's compact JSON, erring towards "output" for any
// shape it does not know.
func carriesOutput(data []byte) bool {
	if len(data) == 0 || bytes.Equal(data, []byte("[DONE]")) {
		return false
	}
	for _, key := range [][]byte{[]byte(`"content":"`), []byte(`"text":"`), []byte(`"reasoning_content":"`)} {
		for rest := data; ; {
			i := bytes.Index(rest, key)
			if i < 0 {
				break
			}
			rest = rest[i+len(key):]
			if len(rest) > 0 && rest[0] != '"' {
				return true
			}
		}
	}
	if bytes.Contains(data, []byte(`"tool_calls"`)) {
		return true
	}
	for _, empty := range [][]byte{[]byte(`"content":""`), []byte(`"text":""`), []byte(`"content":null`), []byte(`"delta":{}`), []byte(`"choices":[]`)} {
		if bytes.Contains(data, empty) {
			return false
		}
	}
	return true
}
