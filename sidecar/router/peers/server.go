package peers

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// gzipAbove is the report size from which compressing pays for its CPU
// (below about one packet it only adds latency).
const gzipAbove = 1400

// Server answers peers' pulls from this replica's state.
type Server struct {
	opts  Options
	state State
	waker Waker // nil: nobody to wake
	// epoch tells peers this process from an earlier one of the same
	// replica, whose Seq numbers meant something else.
	epoch uint64
}

// NewServer serves state's reports and snapshots, and hands pokes to
// waker (which may be nil: a replica without peers pulls nobody).
func NewServer(opts Options, state State, waker Waker) *Server {
	return &Server{opts: opts.withDefaults(), state: state, waker: waker, epoch: rand.Uint64() | 1}
}

// Handler serves GET /peer/v1/report?since=N&from=REPLICA,
// POST /peer/v1/ack?seq=N&from=REPLICA, POST /peer/v1/poke?from=REPLICA
// and GET /peer/v1/snapshot.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ReportPath, s.serveReport)
	mux.HandleFunc("GET "+SnapshotPath, s.serveSnapshot)
	mux.HandleFunc("POST "+AckPath, s.serveAck)
	mux.HandleFunc("POST "+PokePath, s.servePoke)
	return mux
}

func (s *Server) serveReport(w http.ResponseWriter, req *http.Request) {
	var since uint64
	if v := req.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "since: not an unsigned integer", http.StatusBadRequest)
			return
		}
		since = n
	}
	r := s.state.LocalReport(s.puller(req), since)
	r.Replica, r.Epoch = s.opts.Replica, s.epoch
	body, err := encodeBounded(r, s.opts.MaxReportBytes)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Vary", "Accept-Encoding")
	if len(body) < gzipAbove || !acceptsGzip(req) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	_, _ = zw.Write(body)
	_ = zw.Close()
}

// puller names the replica that pulls, so that the policy knows which of
// its reports each peer may hold. A replica that pulls itself (a static
// peer list, or an EndpointSlice, names it too; it stops once it sees its
// own name) is no peer: counted as one, its single report would stand for
// what a peer knows until it ages out. A puller that does not say (an
// older version) counts as one peer named "unnamed".
func (s *Server) puller(req *http.Request) string {
	switch from := req.URL.Query().Get("from"); from {
	case s.opts.Replica:
		return ""
	case "":
		return "unnamed"
	default:
		return from
	}
}

// serveAck takes a peer's word that it applied the report numbered seq
// that it pulled last.
func (s *Server) serveAck(w http.ResponseWriter, req *http.Request) {
	seq, err := strconv.ParseUint(req.URL.Query().Get("seq"), 10, 64)
	if err != nil {
		http.Error(w, "seq: not an unsigned integer", http.StatusBadRequest)
		return
	}
	s.state.PeerApplied(s.puller(req), seq)
	w.WriteHeader(http.StatusNoContent)
}

// servePoke takes a peer's request to be pulled at once (it has just sent
// a long prefill, see State.LongPrefills).
func (s *Server) servePoke(w http.ResponseWriter, req *http.Request) {
	if from := s.puller(req); s.waker != nil && from != "" {
		s.waker.Wake(from)
	}
	w.WriteHeader(http.StatusNoContent)
}

// encodeBounded encodes a report within limit bytes, dropping first its
// seen hashes (popularity is an estimate, and the next report brings more)
// and then its oldest placements (saying so with Truncated) when it does
// not fit: a peer that falls behind then gets the recent placements, which
// matter most.
func encodeBounded(r policy.Report, limit int64) ([]byte, error) {
	for {
		body, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode report: %w", err)
		}
		if int64(len(body)) <= limit {
			return body, nil
		}
		if len(r.Seen) > 0 {
			r.Seen, r.SeenRequests = nil, 0
			continue
		}
		if len(r.Placements) == 0 {
			return nil, fmt.Errorf("report of %d bytes exceeds %d without placements", len(body), limit)
		}
		n := len(r.Placements)
		r.Placements = r.Placements[n-n/2:]
		r.Truncated = true
	}
}

func acceptsGzip(req *http.Request) bool {
	for part := range strings.SplitSeq(req.Header.Get("Accept-Encoding"), ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(name, "gzip") {
			return true
		}
	}
	return false
}

func (s *Server) serveSnapshot(w http.ResponseWriter, _ *http.Request) {
	b := s.state.Snapshot()
	if int64(len(b)) > s.opts.MaxSnapshotBytes {
		// A starting peer would refuse it anyway; say why here.
		http.Error(w, fmt.Sprintf("snapshot of %d bytes exceeds the %d-byte limit", len(b), s.opts.MaxSnapshotBytes),
			http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
