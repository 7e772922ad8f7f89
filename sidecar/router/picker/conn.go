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

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// conn is how a replica reaches the picker: in process when it is the
// leader itself, over the pick API otherwise.
type conn interface {
	pick(ctx context.Context, req pickRequest) (answer, error)
	// events delivers a batch in order and returns the picker's epoch.
	events(ctx context.Context, evs []event) (uint64, error)
	String() string
}

// localConn is the leader's own replica: it decides in process.
type localConn struct {
	l       *ledger
	replica string
}

func (c localConn) pick(ctx context.Context, req pickRequest) (answer, error) {
	return c.l.pick(ctx, c.replica, req, time.Now())
}

func (c localConn) events(_ context.Context, evs []event) (uint64, error) {
	c.l.apply(c.replica, evs, time.Now())
	return c.l.epoch, nil
}

func (c localConn) String() string { return "self" }

// remoteConn calls the leader's pick API.
type remoteConn struct {
	addr    string
	replica string
	keys    Keys
	session *session
	client  *http.Client
}

// errNotLeader is the picker's answer when it does not lead (any more).
var errNotLeader = errors.New("the replica asked is not the elected picker")

// Status codes of the pick API's refusals that a replica tells apart,
// in answers sealed with the endpoint's key only.
const (
	statusUnknownModel = http.StatusNotFound
	statusNoInstance   = http.StatusConflict
	statusNotLeader    = http.StatusServiceUnavailable
	// Flow control's answers (flow.go): queued, call again to wait;
	// refused by a rate limit; refused by the queue.
	statusQueued  = http.StatusAccepted
	statusLimited = http.StatusTooManyRequests
	statusRefused = http.StatusGone
)

// errUnsealed is an answer that does not open with the endpoint's key:
// not the picker's, whatever its status says, so the replica falls back.
var errUnsealed = errors.New("pick API answer not sealed with this endpoint's key")

func (c *remoteConn) call(ctx context.Context, path string, body []byte, limit int64) ([]byte, error) {
	aead := c.session.aead
	seq := c.session.seq.Add(1)
	plain := padded(body, aead.Overhead())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+path, nil)
	if err != nil {
		return nil, err
	}
	mac := c.keys.signCall(req, c.replica, c.session, seq, int64(len(plain)+aead.Overhead()), time.Now())
	sealed := aead.Seal(plain[:0], nonce(dirCall, seq), plain, mac)
	req.Body = io.NopCloser(bytes.NewReader(sealed))
	req.ContentLength = int64(len(sealed))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(sealed)), nil }
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	in, err := io.ReadAll(io.LimitReader(resp.Body, limit+int64(aead.Overhead())+1))
	if err != nil {
		return nil, err
	}
	if int64(len(in)) > limit+int64(aead.Overhead()) {
		return nil, fmt.Errorf("pick API %s: %s: answer over %d bytes", path, resp.Status, limit)
	}
	opened, err := aead.Open(in[:0], nonce(dirAnswer, seq), in, answerAD(mac, resp.StatusCode))
	if err != nil {
		return nil, fmt.Errorf("pick API %s: %s: %w", path, resp.Status, errUnsealed)
	}
	out, err := unpadded(opened)
	if err != nil {
		return nil, fmt.Errorf("pick API %s: %w", path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return out, nil
	case statusUnknownModel:
		return nil, policy.ErrUnknownModel
	case statusNoInstance:
		return nil, policy.ErrNoInstance
	case statusNotLeader:
		return nil, errNotLeader
	case statusQueued:
		return nil, decodeQueued(out)
	case statusLimited:
		return nil, decodeLimited(out)
	case statusRefused:
		return nil, decodeRefusal(out)
	}
	return nil, fmt.Errorf("pick API %s: %s: %s", path, resp.Status, strings.TrimSpace(string(out)))
}

func (c *remoteConn) pick(ctx context.Context, req pickRequest) (answer, error) {
	var buf [2048]byte
	out, err := c.call(ctx, PathPick, req.append(buf[:0]), maxBodyBytes)
	if err != nil {
		return answer{}, err
	}
	return decodeAnswer(out)
}

func (c *remoteConn) events(ctx context.Context, evs []event) (uint64, error) {
	out, err := c.call(ctx, PathEvents, appendEvents(nil, evs), maxBodyBytes)
	if err != nil {
		return 0, err
	}
	r := reader{b: out}
	epoch := r.fixed("epoch")
	return epoch, r.end()
}

// handoff hands the old leader's state to the new one.
func (c *remoteConn) handoff(ctx context.Context, snap []byte) error {
	_, err := c.call(ctx, PathHandoff, snap, maxBodyBytes)
	return err
}

func (c *remoteConn) String() string { return c.addr }

// NewTransport is the pick API client's transport: a few long-lived
// connections to one picker, dialled fast (a dead leader must fail over
// to the fallback at once, not after a long connect timeout).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 200 * time.Millisecond, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}
