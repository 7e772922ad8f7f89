// Command loadgen is the client pod of test/node's traffic spec: workers
// send chat completions to one URL (the router Service's DNS name) back to
// back, as an application would, and count every answer. GET /stats
// reports the counts so far; POST /stop stops the workers, waits for the
// requests in flight and reports the final counts. A request fails when it
// does not get a 200 with a chat completion: nothing is retried, so a
// dropped or refused request during a scale or a router's death shows.
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
	Stopped  bool     `json:"stopped"`
}

const keptFailures = 20

type counter struct {
	mu sync.Mutex
	s  Stats
}

func (c *counter) record(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	return s
}

func main() {
	url := flag.String("url", "", "chat completions URL")
	model := flag.String("model", "", "model name")
	workers := flag.Int("workers", 4, "requests in flight at once")
	listen := flag.String("listen", ":8081", "address of /stats and /stop")
	timeout := flag.Duration("timeout", 30*time.Second, "longest a request may take")
	flag.Parse()
	if *url == "" || *model == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -url and -model are required")
		os.Exit(2)
	}

	ctx, stop := context.WithCancel(context.Background())
	client := &http.Client{Timeout: *timeout}
	var c counter
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				c.record(chat(client, *url, *model, fmt.Sprintf("worker %d request %d: say hello", w, i)))
			}
		})
	}

	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, c.snapshot()) })
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { stop(); wg.Wait() })
		s := c.snapshot()
		s.Stopped = true
		writeJSON(w, s)
	})
	log.Fatal(http.ListenAndServe(*listen, mux))
}

func chat(client *http.Client, url, model, prompt string) error {
	body, err := json.Marshal(map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": 8,
	})
	if err != nil {
		return err
	}
	res, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("read response (status %d): %w", res.StatusCode, err)
	}
	if res.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"chat.completion"`) {
		return fmt.Errorf("status %d: %.200s", res.StatusCode, raw)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
