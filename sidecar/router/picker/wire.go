package picker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// The pick API's bodies are a compact binary encoding (unsigned varints,
// length-prefixed strings, hashes as 8 bytes little-endian): a pick carries
// up to a few hundred block hashes, which JSON would triple in size.

// Paths of the pick API, on the pick listener only.
const (
	PathPick    = "/pick/" + wireVersion + "/pick"
	PathEvents  = "/pick/" + wireVersion + "/events"
	PathHandoff = "/pick/" + wireVersion + "/handoff"
)

// Limits on what a decoder accepts, far above anything a router sends.
const (
	maxBodyBytes  = 1 << 20
	maxHashes     = 1 << 16
	maxStringLen  = 4096
	maxOrderLen   = 4096
	maxBatchLen   = 1 << 16
	maxSnapshotMB = 64
)

var errMalformed = errors.New("malformed pick API body")

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

// maxQueueTimeout is the routing document's bound on a queue timeout: a
// replica never keeps a wait call open longer than that.
const maxQueueTimeout = routing.MaxQueueTimeoutMillis * time.Millisecond

// pickRequest is a replica's question: where does the request with this
// key go. Seq names it in the replica's later events. Events are the
// replica's events not yet delivered, applied before the decision, so the
// picker never decides on a count that the asking replica knows is stale.
type pickRequest struct {
	Seq    uint64
	Key    policy.Key
	Sender Sender
	// Wait is the second call of a request the picker queued (see
	// flow.go), with the Epoch the first call answered.
	Wait   bool
	Epoch  int64
	Events []event
}

// answer is the picker's decision: the instances in the order to try, what
// it charged the first, and its epoch (see ledger).
type answer struct {
	Epoch           uint64
	Order           []string
	Prompt, Prefill int64
	Decision        policy.Decision
	// Warm is the joining instance to send a one-token copy ("": none)
	// and WarmTokens the prompt tokens it was charged (see
	// policy/warm.go); the replica says how it went (eventWarmed).
	Warm       string
	WarmTokens int64
}

// Event kinds a replica tells the picker of its requests.
const (
	eventDone      byte = 1 // the request ended
	eventPrefilled byte = 2 // its first token came
	eventNext      byte = 3 // it moved to the next instance of its order
	eventAdopt     byte = 4 // count a request this picker did not decide
	eventWarmed    byte = 5 // its warm copy ended (OK: answered)
)

// event is one thing a replica tells the picker about one of its requests.
// Done carries the tokens the request used, from its response's usage
// (flow.Unknown: none said), to settle its tenant's rate limits.
// Next names the instance moved to, so that a batch delivered twice (a
// pick call that timed out after the picker applied it) moves it once.
// Adopt carries the request's charge: its order, prompt, prefill left,
// and whether its first token came.
type event struct {
	Kind            byte
	Seq             uint64
	Instance        string
	Order           []string
	Prompt, Prefill int64
	Prefilled       bool
	OK              bool
	Tokens          int64
}

type writer []byte

func (w *writer) uint(v uint64)      { *w = binary.AppendUvarint(*w, v) }
func (w *writer) int(v int64)        { w.uint(uint64(max(v, 0))) }
func (w *writer) str(s string)       { w.uint(uint64(len(s))); *w = append(*w, s...) }
func (w *writer) fixed(v uint64)     { *w = binary.LittleEndian.AppendUint64(*w, v) }
func (w *writer) sint(v int64)       { *w = binary.AppendVarint(*w, v) }
func (w *writer) ms(d time.Duration) { w.int(d.Milliseconds()) }
func (w *writer) bool(b bool) {
	if b {
		*w = append(*w, 1)
	} else {
		*w = append(*w, 0)
	}
}
func (w *writer) strs(ss []string) {
	w.uint(uint64(len(ss)))
	for _, s := range ss {
		w.str(s)
	}
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errMalformed, what)
	}
}

// next takes n bytes (nil: fewer are left, or reading failed before).
func (r *reader) next(n uint64, what string) []byte {
	if r.err != nil || uint64(len(r.b)) < n {
		r.fail(what)
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) uint(what string, limit uint64) uint64 {
	v, n := binary.Uvarint(r.b)
	if r.err != nil || n <= 0 || v > limit {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int(what string) int64 { return int64(r.uint(what, 1<<62)) }

func (r *reader) ms(what string) time.Duration { return time.Duration(r.int(what)) * time.Millisecond }

func (r *reader) sint(what string) int64 {
	v, n := binary.Varint(r.b)
	if r.err != nil || n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) fixed(what string) uint64 {
	if b := r.next(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str(what string) string { return string(r.next(r.uint(what, maxStringLen), what)) }

func (r *reader) bool(what string) bool {
	b := r.next(1, what)
	if b != nil && b[0] > 1 {
		r.fail(what)
	}
	return b != nil && b[0] == 1
}

func (r *reader) strs(what string) []string {
	n := r.uint(what, maxOrderLen)
	out := make([]string, 0, min(n, 64))
	for range n {
		if out = append(out, r.str(what)); r.err != nil {
			return nil
		}
	}
	return out
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return r.err
}

func (p *pickRequest) append(b []byte) []byte {
	w := writer(b)
	w.uint(p.Seq)
	w.str(p.Key.Model)
	w.uint(uint64(p.Key.WindowBlocks))
	w.uint(uint64(p.Key.TextBytes))
	w.uint(uint64(p.Key.PromptBytes))
	hashes := p.Key.BlockHashes()
	w.uint(uint64(len(hashes)))
	for _, h := range hashes {
		w.fixed(h)
	}
	w.str(p.Sender.Tenant)
	w.bool(p.Sender.Lowers)
	w.sint(int64(p.Sender.Priority))
	w.bool(p.Wait)
	w.int(p.Epoch)
	return appendEvents(w, p.Events)
}

func decodePick(b []byte) (pickRequest, error) {
	r := reader{b: b}
	var p pickRequest
	p.Seq = r.uint("seq", 1<<63)
	p.Key.Model = r.str("model")
	p.Key.WindowBlocks = int(r.uint("window blocks", maxHashes))
	p.Key.TextBytes = int(r.uint("text bytes", 1<<40))
	p.Key.PromptBytes = int(r.uint("prompt bytes", 1<<40))
	n := r.uint("hashes", maxHashes)
	if hashes := r.next(8*n, "hashes"); r.err == nil {
		p.Key.Hashes = make([]uint64, n)
		for i := range p.Key.Hashes {
			p.Key.Hashes[i] = binary.LittleEndian.Uint64(hashes[8*i:])
		}
	}
	p.Sender.Tenant = r.str("tenant")
	p.Sender.Lowers = r.bool("lowers")
	p.Sender.Priority = int(max(min(r.sint("priority"), math.MaxInt32), math.MinInt32))
	p.Wait = r.bool("wait")
	p.Epoch = r.int("epoch")
	if r.err == nil {
		p.Events, r.err = decodeEvents(r.b)
	}
	return p, r.err
}

func (a *answer) append(b []byte) []byte {
	w := writer(b)
	w.fixed(a.Epoch)
	w.strs(a.Order)
	w.int(a.Prompt)
	w.int(a.Prefill)
	d := a.Decision
	w.str(string(d.Strategy))
	w.str(d.Spill)
	w.uint(uint64(d.AnchorDepth))
	w.bool(d.ColdPlaced)
	w.str(d.Moved)
	w.uint(uint64(d.MatchChars))
	// Only an answer that warms carries the warm fields: a replica of the
	// version before warming refuses trailing bytes, and so falls back for
	// those answers alone while a rolling update runs, not for every one.
	if a.Warm != "" {
		w.str(a.Warm)
		w.int(a.WarmTokens)
	}
	return w
}

func decodeAnswer(b []byte) (answer, error) {
	r := reader{b: b}
	var a answer
	a.Epoch = r.fixed("epoch")
	a.Order = r.strs("order")
	a.Prompt = r.int("prompt")
	a.Prefill = r.int("prefill")
	a.Decision.Strategy = policy.Strategy(r.str("strategy"))
	a.Decision.Spill = r.str("spill")
	a.Decision.AnchorDepth = int32(r.uint("anchor depth", maxHashes))
	a.Decision.ColdPlaced = r.bool("cold placed")
	a.Decision.Moved = r.str("moved")
	a.Decision.MatchChars = int(r.uint("match chars", 1<<40))
	if r.err == nil && len(r.b) > 0 {
		// Absent from a picker of a version before warming: none.
		a.Warm = r.str("warm")
		a.WarmTokens = r.int("warm tokens")
	}
	return a, r.end()
}

func appendEvents(b []byte, evs []event) []byte {
	w := writer(b)
	w.uint(uint64(len(evs)))
	for _, e := range evs {
		w = append(w, e.Kind)
		w.uint(e.Seq)
		switch e.Kind {
		case eventNext:
			w.str(e.Instance)
		case eventAdopt:
			w.strs(e.Order)
			w.int(e.Prompt)
			w.int(e.Prefill)
			w.bool(e.Prefilled)
		case eventWarmed:
			w.bool(e.OK)
		case eventDone:
			w.sint(e.Tokens)
		}
	}
	return w
}

func decodeEvents(b []byte) ([]event, error) {
	r := reader{b: b}
	n := r.uint("events", maxBatchLen)
	out := make([]event, 0, min(n, 1024))
	for range n {
		kind := r.next(1, "event")
		if kind == nil {
			break
		}
		e := event{Kind: kind[0], Seq: r.uint("seq", 1<<63)}
		switch e.Kind {
		case eventDone:
			e.Tokens = max(r.sint("tokens"), flow.Unknown)
		case eventPrefilled:
		case eventNext:
			e.Instance = r.str("instance")
		case eventAdopt:
			e.Order = r.strs("order")
			e.Prompt = r.int("prompt")
			e.Prefill = r.int("prefill")
			e.Prefilled = r.bool("prefilled")
		case eventWarmed:
			e.OK = r.bool("ok")
		default:
			r.fail("event kind")
		}
		out = append(out, e)
	}
	return out, r.end()
}

// appendRefusal is the status and body of the answer to a pick that err
// refused. Flow control's say why, whose entry, when to retry, and for a
// rate limit its two windows; a queued request's, the queue's epoch and
// timeout.
func appendRefusal(err error) (int, []byte) {
	var (
		queued  *errQueued
		limited *flow.Limited
		refused *flow.Refusal
		w       writer
	)
	status := statusLimited
	switch {
	case errors.As(err, &queued):
		w.int(queued.Epoch)
		w.ms(queued.Timeout)
		return statusQueued, w
	case errors.As(err, &refused):
		status, limited = statusRefused, &flow.Limited{Reason: refused.Reason, Tenant: refused.Tenant, RetryAfter: refused.RetryAfter}
	case errors.As(err, &limited):
	case errors.Is(err, policy.ErrUnknownModel):
		return statusUnknownModel, []byte(err.Error())
	default:
		return statusNoInstance, []byte(err.Error())
	}
	w.str(string(limited.Reason))
	w.str(limited.Tenant)
	w.ms(limited.RetryAfter)
	if status == statusLimited {
		for _, win := range []flow.Window{limited.Requests, limited.Tokens} {
			w.int(win.Limit)
			w.int(win.Remaining)
			w.ms(win.Reset)
		}
	}
	return status, w
}

// decodeRefusal is the error an answer of status stands for (nil: none a
// replica tells apart).
func decodeRefusal(status int, b []byte) error {
	r := reader{b: b}
	var err error
	switch status {
	case statusUnknownModel:
		return policy.ErrUnknownModel
	case statusNoInstance:
		return policy.ErrNoInstance
	case statusNotLeader:
		return errNotLeader
	case statusQueued:
		q := &errQueued{Epoch: r.int("epoch"), Timeout: r.ms("timeout")}
		if q.Timeout <= 0 || q.Timeout > maxQueueTimeout {
			r.fail("queue timeout")
		}
		err = q
	case statusLimited:
		lim := &flow.Limited{Reason: flow.Reason(r.str("reason")), Tenant: r.str("tenant"), RetryAfter: r.ms("retry after")}
		for _, win := range []*flow.Window{&lim.Requests, &lim.Tokens} {
			win.Limit, win.Remaining, win.Reset = r.int("limit"), r.int("remaining"), r.ms("reset")
		}
		err = lim
	case statusRefused:
		err = &flow.Refusal{Reason: flow.Reason(r.str("reason")), Tenant: r.str("tenant"), RetryAfter: r.ms("retry after")}
	default:
		return nil
	}
	if rerr := r.end(); rerr != nil {
		return rerr
	}
	return err
}
