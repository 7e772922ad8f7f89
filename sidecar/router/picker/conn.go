package picker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// errNotLeader is the picker's answer when it does not lead (any more).
var errNotLeader = errors.New("the replica asked is not the elected picker")

// call makes a signed and sealed call to the pick API at addr, and opens
// its answer: the body of a 200, the error another status stands for.
func (p *Picker) call(ctx context.Context, addr, path string, body []byte) ([]byte, error) {
	aead := p.session.aead
	seq := p.session.seq.Add(1)
	plain := padded(body, aead.Overhead())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	mac := p.opts.Keys.signCall(req, p.opts.Replica, p.session, seq, int64(len(plain)+aead.Overhead()), time.Now())
	sealed := aead.Seal(plain[:0], nonce(dirCall, seq), plain, mac)
	req.Body = io.NopCloser(bytes.NewReader(sealed))
	req.ContentLength = int64(len(sealed))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(sealed)), nil }
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	limit := int64(maxBodyBytes + aead.Overhead())
	in, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(in)) > limit {
		return nil, fmt.Errorf("pick API %s: %s: answer over %d bytes", path, resp.Status, maxBodyBytes)
	}
	opened, err := aead.Open(in[:0], nonce(dirAnswer, seq), in, answerAD(mac, resp.StatusCode))
	if err != nil {
		// Not the picker's answer, whatever its status says: fall back.
		return nil, fmt.Errorf("pick API %s: %s: answer not sealed with this endpoint's key", path, resp.Status)
	}
	out, err := unpadded(opened)
	if err != nil {
		return nil, fmt.Errorf("pick API %s: %w", path, err)
	}
	if resp.StatusCode == http.StatusOK {
		return out, nil
	}
	if err := decodeRefusal(resp.StatusCode, out); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("pick API %s: %s: %s", path, resp.Status, strings.TrimSpace(string(out)))
}

func (p *Picker) pickCall(ctx context.Context, addr string, req pickRequest) (answer, error) {
	var buf [2048]byte
	out, err := p.call(ctx, addr, PathPick, req.append(buf[:0]))
	if err != nil {
		return answer{}, err
	}
	return decodeAnswer(out)
}

// events delivers a batch to l in order and returns the picker's epoch.
func (p *Picker) events(ctx context.Context, l *link, evs []event) (uint64, error) {
	if l.led != nil {
		l.led.apply(p.opts.Replica, evs, time.Now())
		return l.led.epoch, nil
	}
	out, err := p.call(ctx, l.addr, PathEvents, appendEvents(nil, evs))
	if err != nil {
		return 0, err
	}
	r := reader{b: out}
	epoch := r.fixed("epoch")
	return epoch, r.end()
}

// newTransport is the pick API client's transport: a few long-lived
// connections to one picker, dialled fast (a dead leader must fail over
// to the fallback at once, not after a long connect timeout).
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 200 * time.Millisecond, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}
