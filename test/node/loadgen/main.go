// Command loadgen is the client pod of test/node's traffic specs: workers
// send chat completions to one URL (the router Service's DNS name), as an
// application would, and count every answer. GET /stats reports the counts
// so far; POST /stop stops the workers, waits for the requests in flight
// and reports the final counts. Nothing is retried, so a dropped or refused
// request shows.
//
// A request succeeds when it gets a 200 with a chat completion. Every
// answer is also counted by its status and the code of its OpenAI error
// body ("429 tenant_queue_full"), with the headers of the first answer of
// each kind, so that a spec can tell a refusal the router meant (with its
// Retry-After) from a request that was never answered (a connection error
// or a timeout).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stats are the counts /stats and /stop report.
type Stats struct {
	OK     int64 `json:"ok"`
	Failed int64 `json:"failed"`
	// Failures holds the first failures' messages, for the test's report.
	Failures []string `json:"failures,omitempty"`
	// Answers counts the answers by kind: the status, and for an error
	// body the code in it ("200", "429 tenant_queue_full").
	Answers map[string]*Answer `json:"answers"`
	// Unanswered counts requests that got no HTTP answer: a connection
	// refused or reset, or no answer within the timeout.
	Unanswered int64 `json:"unanswered"`
	// RefusedWithoutRetryAfter counts 429 and 503 answers without a
	// Retry-After header.
	RefusedWithoutRetryAfter int64 `json:"refusedWithoutRetryAfter"`
	Stopped                  bool  `json:"stopped"`
}

// Answer is one kind of answer: how many, how long they took, and the
// headers of the first.
type Answer struct {
	Count        int64       `json:"count"`
	TotalSeconds float64     `json:"totalSeconds"`
	MaxSeconds   float64     `json:"maxSeconds"`
	FirstHeaders http.Header `json:"firstHeaders"`
}

const keptFailures = 20

type counter struct {
	mu sync.Mutex
	s  Stats
}

// reply is the part of an answer that is counted.
type reply struct {
	status int
	header http.Header
	// kind is the status, followed for an OpenAI error body by its code.
	kind string
}

// record counts one request: its answer when it got one (r non-nil), and
// err when it did not succeed.
func (c *counter) record(r *reply, took time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r == nil {
		c.s.Unanswered++
	} else {
		a := c.s.Answers[r.kind]
		if a == nil {
			a = &Answer{FirstHeaders: r.header}
			c.s.Answers[r.kind] = a
		}
		a.Count++
		a.TotalSeconds += took.Seconds()
		a.MaxSeconds = max(a.MaxSeconds, took.Seconds())
		if (r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable) && r.header.Get("Retry-After") == "" {
			c.s.RefusedWithoutRetryAfter++
		}
	}
	if err == nil {
		c.s.OK++
		return
	}
	c.s.Failed++
	if len(c.s.Failures) < keptFailures {
		c.s.Failures = append(c.s.Failures, time.Now().UTC().Format(time.RFC3339Nano)+" "+err.Error())
	}
}

func (c *counter) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.Failures = append([]string(nil), c.s.Failures...)
	s.Answers = make(map[string]*Answer, len(c.s.Answers))
	for k, a := range c.s.Answers {
		copied := *a
		s.Answers[k] = &copied
	}
	return s
}

// client is what every worker sends with.
type client struct {
	http      *http.Client
	url       string
	model     string
	key       string
	maxTokens int
}

func main() {
	var c client
	flag.StringVar(&c.url, "url", "", "chat completions URL")
	flag.StringVar(&c.model, "model", "", "model name")
	flag.StringVar(&c.key, "key", "", "API key sent as Authorization: Bearer <key> (none when empty)")
	flag.IntVar(&c.maxTokens, "max-tokens", 8, "max_tokens of each request: how long the simulator takes to answer it")
	workers := flag.Int("workers", 4, "requests in flight at once")
	interval := flag.Duration("interval", 0, "least time between the starts of one worker's requests (0: back to back)")
	refusalPause := flag.Duration("refusal-pause", 0, "time a worker waits after an answer other than 200 before its next request, as a client that backs off")
	listen := flag.String("listen", ":8081", "address of /stats and /stop")
	timeout := flag.Duration("timeout", 30*time.Second, "longest a request may take")
	flag.Parse()
	if c.url == "" || c.model == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -url and -model are required")
		os.Exit(2)
	}
	if *workers < 1 || c.maxTokens < 1 || *interval < 0 || *refusalPause < 0 {
		fmt.Fprintln(os.Stderr, "loadgen: -workers and -max-tokens must be at least 1, -interval and -refusal-pause not negative")
		os.Exit(2)
	}
	c.http = &http.Client{Timeout: *timeout}

	ctx, stop := context.WithCancel(context.Background())
	counts := counter{s: Stats{Answers: map[string]*Answer{}}}
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				start := time.Now()
				r, err := c.chat(fmt.Sprintf("worker %d request %d: say hello", w, i))
				counts.record(r, time.Since(start), err)
				pause := *interval - time.Since(start)
				if r != nil && r.status != http.StatusOK {
					pause = max(pause, *refusalPause)
				}
				select {
				case <-time.After(pause):
				case <-ctx.Done():
				}
			}
		})
	}

	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, counts.snapshot()) })
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { stop(); wg.Wait() })
		s := counts.snapshot()
		s.Stopped = true
		writeJSON(w, s)
	})
	log.Fatal(http.ListenAndServe(*listen, mux))
}

// chat sends one chat completion. It returns the answer (nil when there
// was none), and an error unless it was a 200 with a chat completion.
func (c client) chat(prompt string) (*reply, error) {
	body, err := json.Marshal(map[string]any{
		"model":      c.model,
		"messages":   []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": c.maxTokens,
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("read response (status %d): %w", res.StatusCode, err)
	}
	r := &reply{status: res.StatusCode, header: res.Header, kind: answerKind(res.StatusCode, raw)}
	if res.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"chat.completion"`) {
		return r, fmt.Errorf("status %d: %.200s", res.StatusCode, raw)
	}
	return r, nil
}

// answerKind is the status, followed for an OpenAI error body by its code
// (a string in the router's refusals, a number in vLLM's).
func answerKind(status int, body []byte) string {
	kind := strconv.Itoa(status)
	var e struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	if status != http.StatusOK && json.Unmarshal(body, &e) == nil && e.Error.Code != nil {
		kind += " " + fmt.Sprint(e.Error.Code)
	}
	return kind
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
