// Package config keeps the router's routing document current: it reads the
// document from a mounted ConfigMap directory (fsnotify plus a poll) and,
// optionally, straight from the ConfigMap through the Kubernetes API, which
// sees a change in about a second instead of kubelet's sync period.
package config

import (
	"bytes"
	"sync"

	"github.com/go-logr/logr"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// Result of offering a document to the loader, as counted in metrics.
const (
	Applied   = "applied"
	Unchanged = "unchanged"
	Rejected  = "rejected"
)

// Source says where a document came from. The API is authoritative once it
// has delivered a document: the mounted file lags it by up to kubelet's sync
// period, and applying the file's older content after the API's newer one
// would move traffic back and forth.
type Source string

const (
	SourceFile Source = "file"
	SourceAPI  Source = "api"
)

// Loader decodes documents, refuses bad ones and hands good, changed ones to
// Apply, one at a time. The last good document stays in force on a refusal.
type Loader struct {
	// Apply installs a decoded document; an error counts as a rejection.
	Apply func(*routingv1alpha1.Document) error
	// Observe is told every result (for metrics); may be nil.
	Observe func(result string)
	Log     logr.Logger

	mu      sync.Mutex
	current []byte
	lastBy  map[Source][]byte
	fromAPI bool
}

// Offer considers data from src and reports what happened.
func (l *Loader) Offer(src Source, data []byte) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastBy == nil {
		l.lastBy = map[Source][]byte{}
	}
	// Only a change at a source counts, so a poll re-reading the same file
	// does not re-apply (or re-reject) it over and over.
	if prev, ok := l.lastBy[src]; ok && bytes.Equal(prev, data) {
		return Unchanged, nil
	}
	l.lastBy[src] = bytes.Clone(data)
	if src == SourceFile && l.fromAPI {
		l.Log.V(1).Info("ignoring mounted routing document: the API source is authoritative")
		return Unchanged, nil
	}
	if bytes.Equal(l.current, data) {
		l.observe(Unchanged)
		return Unchanged, nil
	}
	doc, err := routingv1alpha1.Decode(data)
	if err == nil {
		err = l.Apply(doc)
	}
	if err != nil {
		l.observe(Rejected)
		l.Log.Error(err, "routing document rejected; keeping the last good one", "source", src)
		return Rejected, err
	}
	l.current = bytes.Clone(data)
	if src == SourceAPI {
		l.fromAPI = true
	}
	l.observe(Applied)
	l.Log.Info("routing document applied", "source", src, "endpoint", doc.Endpoint, "generation", doc.Generation,
		"strategy", doc.Strategy, "instances", len(doc.Instances), "adapters", len(doc.Adapters),
		"flowControl", doc.FlowControl != nil)
	return Applied, nil
}

func (l *Loader) observe(result string) {
	if l.Observe != nil {
		l.Observe(result)
	}
}
