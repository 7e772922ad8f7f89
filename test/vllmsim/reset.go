package vllmsim

import (
	"fmt"
	"net/http"
)

// ResetPrefixCache empties the prefix cache (blocks of running requests
// stay), as vLLM's development endpoint POST /reset_prefix_cache does, so a
// benchmark or the demo can compare strategies from cold caches without
// restarting the server. It returns the number of blocks evicted.
func (s *Server) ResetPrefixCache() int {
	e := s.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.pool.reset()
	e.publishLocked()
	return n
}

func (s *Server) serveResetPrefixCache(w http.ResponseWriter, _ *http.Request) {
	n := s.ResetPrefixCache()
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "reset: %d blocks evicted\n", n)
}
