package harness

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmroute/warmroute/test/process"
)

// TestWaitStartedGivesUpWhenTheProcessExits: a process that exits before it
// answers ends the wait on its exit (not at the timeout, an hour away), and
// the error quotes the end of its log.
func TestWaitStartedGivesUpWhenTheProcessExits(t *testing.T) {
	dir := t.TempDir()
	p, err := process.Start("quitter", "/bin/sh", []string{"-c", "echo 'router failed: cache salt key too short'; exit 1"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	// An address nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	err = waitStarted(context.Background(), p, filepath.Join(dir, "quitter.log"), "http://"+addr+"/healthz", time.Hour)
	if err == nil {
		t.Fatal("waited successfully on a process that exited")
	}
	if !strings.Contains(err.Error(), "cache salt key too short") {
		t.Errorf("error does not quote the log: %v", err)
	}
	if !strings.Contains(err.Error(), "the process exited") {
		t.Errorf("the wait did not end on the exit: %v", err)
	}
}
