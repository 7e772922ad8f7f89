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

func (c localConn) pick(_ context.Context, req pickRequest) (answer, error) {
	return c.l.pick(c.replica, req, time.Now())
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
	client  *http.Client
}

// errNotLeader is the picker's answer when it does not lead (any more).
var errNotLeader = errors.New("the replica asked is not the elected picker")

// Status codes of the pick API's refusals that a replica tells apart.
const (
	statusUnknownModel = http.StatusNotFound
	statusNoInstance   = http.StatusConflict
	statusNotLeader    = http.StatusServiceUnavailable
)

func (c *remoteConn) call(ctx context.Context, path string, body []byte, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	mac := c.keys.signCall(req, c.replica, body, time.Now())
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case statusUnknownModel:
		return nil, policy.ErrUnknownModel
	case statusNoInstance:
		return nil, policy.ErrNoInstance
	case statusNotLeader:
		return nil, errNotLeader
	default:
		return nil, fmt.Errorf("pick API %s: %s: %s", path, resp.Status, strings.TrimSpace(string(out)))
	}
	if err := c.keys.verifyAnswer(resp.Header, mac, out); err != nil {
		return nil, err
	}
	return out, nil
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
