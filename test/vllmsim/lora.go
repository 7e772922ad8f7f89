package vllmsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// loras is the set of runtime-loaded adapters, served like vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter (enabled in vLLM by
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).
type loras struct {
	max       int
	fail      map[string]bool
	loadDelay time.Duration // wall-clock, already scaled
	exists    func(path string) bool

	mu      sync.Mutex
	paths   map[string]string // loaded adapter → path
	order   []string          // load order, for /v1/models
	loading map[string]bool
}

func newLoRAs(cfg Config) *loras {
	l := &loras{
		max:       cfg.MaxLoRAs,
		fail:      make(map[string]bool),
		loadDelay: time.Duration(float64(cfg.LoRALoadDelay) * cfg.TimeScale),
		paths:     make(map[string]string),
		loading:   make(map[string]bool),
		exists:    cfg.LoRAPathExists,
	}
	if l.exists == nil {
		l.exists = hostPathExists
	}
	for _, name := range cfg.LoRAFail {
		l.fail[name] = true
	}
	names := make([]string, 0, len(cfg.LoRAModules))
	for name := range cfg.LoRAModules {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		l.paths[name] = cfg.LoRAModules[name]
		l.order = append(l.order, name)
	}
	return l
}

func (l *loras) loaded(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.paths[name]
	return ok
}

// list returns the loaded adapters in load order with their paths.
func (l *loras) list() (names, paths []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.order {
		names = append(names, n)
		paths = append(paths, l.paths[n])
	}
	return names, paths
}

func (l *loras) serveLoad(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid request body: %v", err)
		return
	}
	if req.Name == "" || req.Path == "" {
		writeError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	l.mu.Lock()
	_, loaded := l.paths[req.Name]
	switch {
	case loaded || l.loading[req.Name]:
		l.mu.Unlock()
		writeError(w, http.StatusBadRequest, "InvalidUserInput", "The lora adapter '%s' has already been loaded.", req.Name)
		return
	case l.max > 0 && len(l.paths)+len(l.loading) >= l.max:
		l.mu.Unlock()
		writeError(w, http.StatusBadRequest, "BadRequestError",
			"Loading lora %s failed: the maximum number of LoRA adapters (%d) is already loaded.", req.Name, l.max)
		return
	}
	l.loading[req.Name] = true
	l.mu.Unlock()

	err := sleepContext(r.Context(), l.loadDelay)

	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.loading, req.Name)
	switch {
	case err != nil:
		return // the client is gone
	case !l.exists(req.Path):
		// vLLM's answer when the path holds no adapter (nor names one on
		// the Hugging Face Hub).
		writeError(w, http.StatusNotFound, "NotFoundError",
			"Loading lora %s failed: No adapter found for %s", req.Name, req.Path)
		return
	case l.fail[req.Name]:
		writeError(w, http.StatusBadRequest, "BadRequestError",
			"Loading lora %s failed: simulated failure for adapter path %s", req.Name, req.Path)
		return
	}
	l.paths[req.Name] = req.Path
	l.order = append(l.order, req.Name)
	writeText(w, fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", req.Name))
}

func (l *loras) serveUnload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid request body: %v", err)
		return
	}
	if req.Name == "" {
		writeError(w, http.StatusBadRequest, "InvalidUserInput", "either 'lora_name' and 'lora_int_id' needs to be provided.")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.paths[req.Name]; !ok {
		writeError(w, http.StatusNotFound, "NotFoundError", "The lora adapter '%s' cannot be found.", req.Name)
		return
	}
	delete(l.paths, req.Name)
	l.order = slices.DeleteFunc(l.order, func(n string) bool { return n == req.Name })
	writeText(w, fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", req.Name))
}

// hostPathExists is the default LoRAPathExists: an absolute path must be a
// directory here; other paths are Hugging Face ids, taken on trust.
func hostPathExists(path string) bool {
	if !filepath.IsAbs(path) {
		return true
	}
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}

func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
