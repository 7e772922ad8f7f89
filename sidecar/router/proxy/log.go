package proxy

import (
	"log"
	"strings"

	"github.com/go-logr/logr"
)

// StdLogger adapts a structured logger to the *log.Logger that net/http and
// httputil.ReverseProxy write their own errors to, so that a JSON log stays
// JSON (their default is plain text on stderr).
func StdLogger(l logr.Logger) *log.Logger {
	return log.New(stdWriter{l}, "", 0)
}

type stdWriter struct{ l logr.Logger }

func (w stdWriter) Write(p []byte) (int, error) {
	w.l.Info("net/http", "detail", strings.TrimSpace(string(p)))
	return len(p), nil
}
