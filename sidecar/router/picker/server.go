package picker

import (
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// serverLimits bound what a peer of the pick port can hold. A replica
// keeps at most newTransport's 256 idle connections to the picker and
// opens one per concurrent call, so 1,024 serve four busy replicas, or
// many quiet ones, at a few tens of MB; more are closed as they come, so
// their callers fall back at once. A header and a pick come in one
// packet; 2 s is a stalled peer. A 64 MiB handoff takes under a second on
// a pod network; 10 s is a stalled one. Idle connections outlive the
// client's IdleConnTimeout (30 s), so the client, not the picker, closes
// them, and never sends a call on a connection the picker is closing.
type serverLimits struct {
	conns                         int64
	readHeader, read, write, idle time.Duration
}

var defaultServerLimits = serverLimits{conns: 1024, readHeader: 2 * time.Second, read: 10 * time.Second, write: 10 * time.Second, idle: 60 * time.Second}

// Server is the pick listener's server on addr; errorLog takes net/http's
// own errors (nil: the standard logger).
func (p *Picker) Server(addr string, errorLog *log.Logger) *http.Server {
	return p.server(addr, defaultServerLimits, errorLog)
}

func (p *Picker) server(addr string, lim serverLimits, errorLog *log.Logger) *http.Server {
	var open atomic.Int64
	return &http.Server{Addr: addr, Handler: p.Handler(), ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read,
		WriteTimeout: lim.write, IdleTimeout: lim.idle, MaxHeaderBytes: 16 << 10, ErrorLog: errorLog,
		ConnState: func(c net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				// Each request flow control queues holds a connection
				// open while it waits.
				if open.Add(1) > lim.conns+int64(p.flowConfig().MaxQueued) {
					_ = c.Close() // its goroutine sees it closed, and reports StateClosed
				}
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		}}
}

// Handler serves the pick API while this replica leads (503 otherwise,
// so callers fall back or find the new leader). Calls of another wire
// version get 426, which their replicas treat as a failed call (they fall
// back), never as a refusal to act on.
func (p *Picker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathPick, p.servePick)
	mux.HandleFunc("POST "+PathEvents, p.serveEvents)
	mux.HandleFunc("POST "+PathHandoff, p.serveHandoff)
	mux.HandleFunc("/pick/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		http.Error(w, "this picker speaks pick API "+wireVersion+" only: upgrade the router", http.StatusUpgradeRequired)
	})
	return mux
}

var errReplayed = errors.New("pick API call replayed")

// authenticated checks a call's header, then reads and opens its body:
// a caller without the key gets 401 before a byte of its body is read.
func (p *Picker) authenticated(w http.ResponseWriter, req *http.Request) (c call, ok bool) {
	now := time.Now()
	c, err := p.opts.Keys.verifyCall(req, now)
	if err == nil && c.at.Before(p.peers.started) {
		err = errReplayed
	}
	if err == nil {
		if c.peer = p.peers.get(c.session, now); !c.peer.fresh(c.seq) {
			err = errReplayed
		}
	}
	if err != nil {
		p.refuse(w, err)
		return call{}, false
	}
	// A pick or a batch of events is a few KB (the decoders' limits are
	// far above), a handoff a snapshot.
	limit := int64(maxBodyBytes)
	if req.URL.Path == PathHandoff {
		limit = maxSnapshotMB<<20 + maxBucket
	}
	if req.ContentLength > limit+int64(c.peer.aead.Overhead()) {
		w.Header().Set("Connection", "close")
		p.reply(w, c, http.StatusRequestEntityTooLarge, []byte("body of "+strconv.FormatInt(req.ContentLength, 10)+" bytes, the most is "+strconv.FormatInt(limit, 10)))
		return call{}, false
	}
	buf := make([]byte, req.ContentLength)
	if _, err := io.ReadFull(req.Body, buf); err != nil {
		w.Header().Set("Connection", "close")
		p.reply(w, c, http.StatusBadRequest, []byte("read body: "+err.Error()))
		return call{}, false
	}
	plain, err := c.peer.aead.Open(buf[:0], nonce(dirCall, c.seq), buf, c.mac)
	if err != nil {
		err = errUnauthenticated
	} else if !c.peer.accept(c.seq, now) {
		err = errReplayed
	}
	if err != nil {
		p.refuse(w, err)
		return call{}, false
	}
	if c.body, err = unpadded(plain); err != nil {
		p.reply(w, c, http.StatusBadRequest, []byte(err.Error()))
		return call{}, false
	}
	return c, true
}

// refuse answers a call that is not a key holder's, or not new: 401, no
// information, and the connection closed, so that it holds nothing.
func (p *Picker) refuse(w http.ResponseWriter, err error) {
	p.opts.Metrics.Refused.Inc()
	p.opts.Log.V(1).Info("pick API call refused", "error", err.Error())
	w.Header().Set("Connection", "close")
	http.Error(w, "unauthenticated", http.StatusUnauthorized)
}

// reply seals the answer to c.
func (p *Picker) reply(w http.ResponseWriter, c call, status int, out []byte) {
	aead := c.peer.aead
	plain := padded(out, aead.Overhead())
	sealed := aead.Seal(plain[:0], nonce(dirAnswer, c.seq), plain, answerAD(c.mac, status))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(sealed)))
	w.WriteHeader(status)
	_, _ = w.Write(sealed)
}

// toLeader is authenticated for the calls only the leader answers.
func (p *Picker) toLeader(w http.ResponseWriter, req *http.Request) (*ledger, call, bool) {
	c, ok := p.authenticated(w, req)
	if !ok {
		return nil, call{}, false
	}
	l := p.leading()
	if l == nil {
		p.reply(w, c, statusNotLeader, []byte(errNotLeader.Error()))
		return nil, call{}, false
	}
	return l, c, true
}

func (p *Picker) servePick(w http.ResponseWriter, req *http.Request) {
	l, c, ok := p.toLeader(w, req)
	if !ok {
		return
	}
	pr, err := decodePick(c.body)
	if err != nil {
		p.reply(w, c, http.StatusBadRequest, []byte(err.Error()))
		return
	}
	if pr.Wait {
		// A queued request's call stays open while it waits.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(l.flow.QueueTimeout() + defaultServerLimits.write))
	}
	a, err := l.pick(req.Context(), c.caller, pr, time.Now())
	if err != nil {
		status, out := appendRefusal(err)
		p.reply(w, c, status, out)
		return
	}
	var buf [512]byte
	p.reply(w, c, http.StatusOK, a.append(buf[:0]))
}

func (p *Picker) serveEvents(w http.ResponseWriter, req *http.Request) {
	l, c, ok := p.toLeader(w, req)
	if !ok {
		return
	}
	evs, err := decodeEvents(c.body)
	if err != nil {
		p.reply(w, c, http.StatusBadRequest, []byte(err.Error()))
		return
	}
	l.apply(c.caller, evs, time.Now())
	p.reply(w, c, http.StatusOK, binary.LittleEndian.AppendUint64(nil, l.epoch))
}

func (p *Picker) serveHandoff(w http.ResponseWriter, req *http.Request) {
	l, c, ok := p.toLeader(w, req)
	if !ok {
		return
	}
	if err := l.receive(c.body, time.Now()); err != nil {
		p.opts.Metrics.Handoffs.WithLabelValues("received", "refused").Inc()
		p.reply(w, c, http.StatusConflict, []byte(err.Error()))
		return
	}
	p.opts.Metrics.Handoffs.WithLabelValues("received", "restored").Inc()
	p.opts.Log.Info("restored the old leader's state", "from", c.caller, "indexEntries", l.policy.IndexEntries())
	p.reply(w, c, http.StatusOK, nil)
}
