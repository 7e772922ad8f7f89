package picker

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// Handler serves the pick API on the pick listener: picks and events while
// this replica leads (503 otherwise, so callers fall back or find the new
// leader), and the state its predecessor hands it when it steps down. Every call must be signed with the endpoint's key (auth.go);
// anything else gets 401 and no information.
func (p *Picker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathPick, p.servePick)
	mux.HandleFunc("POST "+PathEvents, p.serveEvents)
	mux.HandleFunc("POST "+PathHandoff, p.serveHandoff)
	return mux
}

// authenticated reads a call's body and checks its signature.
func (p *Picker) authenticated(w http.ResponseWriter, req *http.Request) (caller, mac string, body []byte, ok bool) {
	limit := int64(maxBodyBytes)
	if req.URL.Path == PathHandoff {
		limit = maxSnapshotMB << 20
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, limit))
	if err != nil {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return "", "", nil, false
	}
	caller, mac, err = p.opts.Keys.verifyCall(req, body, time.Now())
	if err != nil {
		p.opts.Metrics.refused()
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return "", "", nil, false
	}
	return caller, mac, body, true
}

func (p *Picker) reply(w http.ResponseWriter, mac string, out []byte) {
	p.opts.Keys.signAnswer(w.Header(), mac, out)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

// toLeader is authenticated for the calls only the leader answers.
func (p *Picker) toLeader(w http.ResponseWriter, req *http.Request) (l *ledger, caller, mac string, body []byte, ok bool) {
	caller, mac, body, ok = p.authenticated(w, req)
	if !ok {
		return nil, "", "", nil, false
	}
	if l = p.leading(); l == nil {
		http.Error(w, errNotLeader.Error(), statusNotLeader)
		return nil, "", "", nil, false
	}
	return l, caller, mac, body, true
}

func (p *Picker) servePick(w http.ResponseWriter, req *http.Request) {
	l, caller, mac, body, ok := p.toLeader(w, req)
	if !ok {
		return
	}
	pr, err := decodePick(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a, err := l.pick(caller, pr, time.Now())
	switch {
	case errors.Is(err, policy.ErrUnknownModel):
		http.Error(w, err.Error(), statusUnknownModel)
		return
	case err != nil:
		http.Error(w, err.Error(), statusNoInstance)
		return
	}
	var buf [512]byte
	p.reply(w, mac, a.append(buf[:0]))
}

func (p *Picker) serveEvents(w http.ResponseWriter, req *http.Request) {
	l, caller, mac, body, ok := p.toLeader(w, req)
	if !ok {
		return
	}
	evs, err := decodeEvents(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	l.apply(caller, evs, time.Now())
	w8 := writer(nil)
	w8.fixed(l.epoch)
	p.reply(w, mac, w8)
}

func (p *Picker) serveHandoff(w http.ResponseWriter, req *http.Request) {
	l, caller, mac, body, ok := p.toLeader(w, req)
	if !ok {
		return
	}
	if err := l.receive(body, time.Now()); err != nil {
		p.opts.Metrics.Handoffs.WithLabelValues("received", "refused").Inc()
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	p.opts.Metrics.Handoffs.WithLabelValues("received", "restored").Inc()
	p.opts.Log.Info("restored the old leader's state", "from", caller, "indexEntries", l.policy.IndexEntries())
	p.reply(w, mac, nil)
}
