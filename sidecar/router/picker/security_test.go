package picker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmroute/warmroute/sidecar/router/policy"
)

// guard bounds a test's wait on the network: a test that reaches it has
// failed (the server did not answer or close), it is never the assertion.
const guard = 5 * time.Second

// rawCall sends head (a request line and headers, without the blank line)
// and then bodyBytes of a larger body, and returns the status line of the
// answer, "" if none came before the guard.
func rawCall(t *testing.T, addr, head string, bodyBytes int) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(guard))
	// A write fails once the server closed the connection: its answer,
	// if any, is still there to read.
	if _, err := io.WriteString(c, head+"\r\n\r\n"); err == nil {
		_, _ = c.Write(make([]byte, bodyBytes))
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// An upload without a valid signature is refused on its header: the
// picker answers 401 while the caller has sent 64 KiB of a declared
// 63 MiB, instead of reading (and holding) the whole body first.
func TestPickAPIChecksBeforeReading(t *testing.T) {
	keys := testKeys(t, testSecret)
	_, srv := newLeader(t, keys, testConfig(keys, 3, 10))
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, auth := range []string{"", AuthHeader + ": " + wireVersion + " 00112233445566778899aabbccddeeff 1 " + fmt.Sprint(time.Now().UnixMilli()) + " 00ff router-9"} {
		head := "POST " + PathHandoff + " HTTP/1.1\r\nHost: picker\r\nContent-Length: " + fmt.Sprint(63<<20)
		if auth != "" {
			head += "\r\n" + auth
		}
		if got := rawCall(t, addr, head, 64<<10); !strings.Contains(got, " 401 ") {
			t.Errorf("header %q: answer %q before the body came, want 401", auth, got)
		}
	}
}

// The pick port's server closes a connection that stalls in its header,
// and connections past its limit, so stalled peers hold nothing for long
// and never more than the limit.
func TestPickServerLimits(t *testing.T) {
	keys := testKeys(t, testSecret)
	p, _ := newLeader(t, keys, testConfig(keys, 3, 10))
	lim := defaultServerLimits
	lim.conns, lim.readHeader = 2, 50*time.Millisecond
	addr := strings.TrimPrefix(serveWith(t, p.server("", lim, nil)).URL, "http://")
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(guard))
		_, err := io.ReadAll(c)
		return !errors.Is(err, os.ErrDeadlineExceeded)
	}
	// A header that never ends is cut off.
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	_, _ = io.WriteString(stalled, "POST "+PathPick+" HTTP/1.1\r\nHost: picker\r\n")
	if !closed(stalled) {
		t.Error("a connection stalled in its header was not closed")
	}
	// Of three connections held open, the third is closed at once.
	lim.readHeader = guard
	addr = strings.TrimPrefix(serveWith(t, p.server("", lim, nil)).URL, "http://")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !closed(over) {
		t.Error("a connection past the limit was served")
	}
	if got := rawCall(t, addr, "POST "+PathPick+" HTTP/1.1\r\nHost: picker\r\nContent-Length: 0", 0); got != "" {
		t.Errorf("a call past the limit was answered: %q", got)
	}
	held[0].Close()
	// Once one of the held connections closes, calls are served again.
	eventually(t, "a call to be answered under the limit", func() bool {
		return strings.Contains(rawCall(t, addr, "POST "+PathPick+" HTTP/1.1\r\nHost: picker\r\nContent-Length: 0", 0), " 401 ")
	})
}

// recorder is a transport that keeps a copy of every call and answer a
// replica exchanges with the picker, as an observer of the pod network
// would see them.
type recorder struct {
	mu      sync.Mutex
	calls   []*http.Request
	bodies  [][]byte
	answers [][]byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, req.Clone(context.Background()))
	r.bodies = append(r.bodies, body)
	r.answers = append(r.answers, answer)
	return resp, nil
}

// pickCalls are the recorded pick calls, with their bodies and answers.
func (r *recorder) pickCalls() (calls []*http.Request, bodies, answers [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range r.calls {
		if c.URL.Path == PathPick {
			calls, bodies, answers = append(calls, c), append(bodies, r.bodies[i]), append(answers, r.answers[i])
		}
	}
	return calls, bodies, answers
}

// recordedFollower is "router-1" asking leader at srv through a recorder.
func recordedFollower(t *testing.T, keys Keys, cfg policy.Config, srv *httptest.Server) (*Picker, *recorder) {
	t.Helper()
	rec := &recorder{}
	f := New(Options{Replica: "router-1", Keys: keys, Own: policy.New(policy.Tuning{}), Tries: testTries, PickTimeout: guard})
	f.client.Transport = rec
	if err := f.Update(cfg); err != nil {
		t.Fatal(err)
	}
	f.Follow(strings.TrimPrefix(srv.URL, "http://"))
	return f, rec
}

// A signed pick captured on the wire and played again, within its time
// window, is refused and counts nothing: 120 replays of one pick leave
// the picker counting the one request.
func TestReplayedPicksAreRefused(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 3, 10)
	leader, srv := newLeader(t, keys, cfg)
	f, rec := recordedFollower(t, keys, cfg, srv)
	tk, err := f.Pick(context.Background(), key(f, "a request someone captured"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done()
	calls, bodies, _ := rec.pickCalls()
	if len(calls) != 1 || picks(t, f.opts.Metrics, "picker") != 1 {
		t.Fatalf("%d pick calls recorded, %v picks by the picker; want 1", len(calls), picks(t, f.opts.Metrics, "picker"))
	}
	refusedBefore := counter(leader.opts.Metrics.Refused)
	for i := range 120 {
		replay, err := http.NewRequest(http.MethodPost, srv.URL+PathPick, bytes.NewReader(bodies[0]))
		if err != nil {
			t.Fatal(err)
		}
		replay.Header = calls[0].Header.Clone()
		resp, err := http.DefaultClient.Do(replay)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("replay %d: %s, want 401", i, resp.Status)
		}
	}
	if got := counter(leader.opts.Metrics.Refused) - refusedBefore; got != 120 {
		t.Errorf("%v replays counted refused, want 120", got)
	}
	if n := leader.leading().open(); n != 1 {
		t.Errorf("the picker counts %d requests after 120 replays of one, want 1", n)
	}
}

// A replica that goes silent has its requests released by a picker that
// was never elected (a fixed --picker), as by an elected one: the next
// decision after ticketTTL no longer counts them.
func TestSilentReplicaExpiresUnderAFixedPicker(t *testing.T) {
	leader, follower := leaderAndFollower(t, 3)
	tk, err := follower.Pick(context.Background(), key(follower, "a request whose replica dies"), Sender{})
	if err != nil {
		t.Fatal(err)
	}
	_ = tk              // never done: the replica dies with it
	follower.Follow("") // and says nothing more
	l := leader.leading()
	if n := l.open(); n != 1 {
		t.Fatalf("the picker counts %d requests, want 1", n)
	}
	later := time.Now().Add(ticketTTL + 2*heartbeatEvery)
	if _, err := l.pick(context.Background(), "router-0", pickRequest{Seq: 1, Key: key(leader, "the leader's own request")}, later); err != nil {
		t.Fatal(err)
	}
	if n := l.open(); n != 1 {
		t.Errorf("after the silent replica's TTL the picker counts %d requests, want only the leader's own", n)
	}
}

// A replica acts only on answers sealed with the endpoint's key: a
// picker the Lease names that does not hold it gets a failed call for
// whatever it answers, and the request goes by the fallback — never
// model_not_found (404), never held (409), never a decision (200).
func TestFollowersIgnoreUnsealedAnswers(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 3, 10)
	for _, status := range []int{http.StatusNotFound, http.StatusConflict, http.StatusServiceUnavailable, http.StatusOK, http.StatusUnauthorized} {
		impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write(make([]byte, 300))
		}))
		f := newReplica(t, "router-1", keys, cfg)
		f.Follow(strings.TrimPrefix(impostor.URL, "http://"))
		tk, err := f.Pick(context.Background(), key(f, "a question for the served model"), Sender{})
		impostor.Close()
		if err != nil {
			t.Errorf("impostor answering %d: the pick failed: %v", status, err)
			continue
		}
		tk.Done()
		if got := picks(t, f.opts.Metrics, "fallback"); got != 1 {
			t.Errorf("impostor answering %d: %v fallbacks, want 1", status, got)
		}
	}
}

// A leader that steps down sends its state sealed: a successor the Lease
// names without holding the key receives nothing it can restore.
func TestHandoffIsSealedFromImpostors(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 5, 100)
	old := newReplica(t, "router-0", keys, cfg)
	if err := old.Lead(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		tk, err := old.Pick(context.Background(), key(old, fmt.Sprintf("document %d: %s", i, strings.Repeat("filler ", 20))), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
	}
	snap := old.stepDown()
	var mu sync.Mutex
	var got [][]byte
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
	}))
	defer impostor.Close()
	lease := func(context.Context) (string, error) {
		return "router-9@" + strings.TrimPrefix(impostor.URL, "http://"), nil
	}
	old.handOver(lease, "router-0@somewhere", snap)
	if n := counter(old.opts.Metrics.Handoffs.WithLabelValues("sent", "ok")); n != 0 {
		t.Errorf("the old leader counts %v handoffs to an impostor as sent", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range got {
		if err := policy.New(policy.Tuning{}).Restore(b); err == nil {
			t.Errorf("the impostor restored the %d bytes it received", len(b))
		}
		if bytes.Contains(b, snap[:min(len(snap), 64)]) {
			t.Error("the impostor received the snapshot in clear")
		}
	}
}

// An observer of the pod network learns nothing of a pick: neither its
// block hashes, nor its model, nor the instances answered, and two picks
// of different lengths within a size bucket look alike.
func TestPickTrafficRevealsNothing(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 3, 10)
	cfg.Model = "confidential-model-7b"
	_, srv := newLeader(t, keys, cfg)
	f, rec := recordedFollower(t, keys, cfg, srv)
	var hashes [][]byte
	for _, text := range []string{strings.Repeat("a shared system prompt. ", 12), strings.Repeat("a shared system prompt. ", 20)} {
		k := f.opts.Own.Key(policy.Request{Model: cfg.Model, Text: []byte(text), WindowBytes: len(text), PromptBytes: len(text)})
		for _, h := range k.BlockHashes() {
			hashes = append(hashes, binary.LittleEndian.AppendUint64(nil, h))
		}
		tk, err := f.Pick(context.Background(), k, Sender{})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
	}
	if picks(t, f.opts.Metrics, "picker") != 2 {
		t.Fatalf("%v picks by the picker, want 2", picks(t, f.opts.Metrics, "picker"))
	}
	_, bodies, answers := rec.pickCalls()
	for i, b := range bodies {
		for _, h := range hashes {
			if bytes.Contains(b, h) {
				t.Errorf("pick %d carries a block hash in clear", i)
			}
		}
		if bytes.Contains(b, []byte(cfg.Model)) {
			t.Errorf("pick %d carries the model name in clear", i)
		}
		if bytes.Contains(answers[i], []byte("vllm-")) {
			t.Errorf("answer %d names an instance in clear", i)
		}
	}
	if len(bodies) != 2 || len(bodies[0]) != len(bodies[1]) {
		t.Errorf("picks of 12 and 20 sentences: bodies of %d and %d bytes, want one size", len(bodies[0]), len(bodies[len(bodies)-1]))
	}
}

// A caller of the previous wire version gets a clear refusal that its
// replica treats as a failed call (426), not one it would act on.
func TestOldWireVersionIsRefused(t *testing.T) {
	keys := testKeys(t, testSecret)
	_, srv := newLeader(t, keys, testConfig(keys, 3, 10))
	for _, path := range []string{"/pick/v1/pick", "/pick/v1/events", "/pick/v1/handoff"} {
		resp, err := http.Post(srv.URL+path, "application/octet-stream", bytes.NewReader([]byte{1, 0}))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired || !strings.Contains(string(body), wireVersion) {
			t.Errorf("%s: %d %q, want 426 naming %s", path, resp.StatusCode, body, wireVersion)
		}
	}
}

// A replica whose term ends after the Lease moved (client-go runs
// OnStoppedLeading up to the renew deadline later) follows the new
// holder once its term is over, even the picker it followed before its
// term, in either order of the two events.
func TestExLeaderFollowsAfterALateLeaseMove(t *testing.T) {
	keys := testKeys(t, testSecret)
	cfg := testConfig(keys, 3, 10)
	_, srv := newLeader(t, keys, cfg)
	other := "router-0@" + strings.TrimPrefix(srv.URL, "http://")
	const self = "router-1@127.0.0.1:1"
	p := newReplica(t, "router-1", keys, cfg)
	picked := func(what string) {
		t.Helper()
		before := picks(t, p.opts.Metrics, "picker")
		tk, err := p.Pick(context.Background(), key(p, "a question"), Sender{})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
		if picks(t, p.opts.Metrics, "picker") != before+1 {
			t.Fatalf("%s: the pick did not go to the picker the Lease names", what)
		}
	}
	p.track(other, self)
	picked("following")
	for _, moveFirst := range []bool{true, false} {
		p.startTerm()
		if moveFirst {
			p.track(other, self) // the Lease moved; the term is not over
			p.stepDown()
		} else {
			p.stepDown()
		}
		p.track(other, self)
		picked(fmt.Sprintf("after a term (Lease moved before it ended: %v)", moveFirst))
	}
}
