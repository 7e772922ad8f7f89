package harness

import (
	"maps"
	"sync"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// SimRegistry remembers every simulator the pod agent started, by pod name,
// including stopped ones, so a test can read their counters afterwards.
type SimRegistry struct {
	mu   sync.Mutex
	sims map[string]*vllmsim.Server
}

func (r *SimRegistry) add(pod string, s *vllmsim.Server) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sims == nil {
		r.sims = map[string]*vllmsim.Server{}
	}
	r.sims[pod] = s
}

// All returns the simulators by pod name.
func (r *SimRegistry) All() map[string]*vllmsim.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.sims)
}
