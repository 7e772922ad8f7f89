// Package process runs the helper processes of the tests and the demo (the
// control plane, the operator, the router) so that none outlives its test:
// each runs in its own process group, is killed if the test process dies,
// and Stop returns only once it is gone.
package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Process is one started binary, logging to <logDir>/<name>.log.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// Start runs bin with args.
func Start(name, bin string, args []string, logDir string, env ...string) (*Process, error) {
	logf, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close() // the child never wrote to it
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		p.err = cmd.Wait()
		if p.err == nil {
			p.err = errExitedCleanly
		}
		_ = logf.Close() // the child's writes went through its own descriptor
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Name is the name it was started under.
func (p *Process) Name() string { return p.name }

// errExitedCleanly is how a process that exited with status 0 ended: every
// caller of Exited expects its process to be still running, so it is an error
// there too, and one that a message can wrap.
var errExitedCleanly = errors.New("exit status 0")

// Exited reports, without blocking, whether the process has ended and if so
// how: the error is never nil once it has.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process group to end, and kills it if it has not within the
// grace period. It returns only once the process is gone.
func (p *Process) Stop(grace time.Duration) error {
	if ok, _ := p.Exited(); ok {
		return nil
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
	}
}

// Alive reports whether a pid still names a live (non-zombie) process.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return !errors.Is(err, syscall.ESRCH)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses; Z is a zombie.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}

// KillAndWait sends SIGTERM, then SIGKILL after grace, and waits for
// the pid to disappear.
func KillAndWait(pid int, grace time.Duration) {
	if !Alive(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if Alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 100 && Alive(pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// StartReaper starts a small watchdog that kills pids (SIGTERM, then
// SIGKILL) once this process is gone. It covers what Pdeathsig cannot:
// processes started by libraries (envtest's etcd and kube-apiserver) would
// otherwise outlive a test binary killed by `go test -timeout` or a crash.
// The watchdog exits by itself when the pids are gone.
func StartReaper(pids []int) error {
	if len(pids) == 0 {
		return nil
	}
	list := ""
	for _, pid := range pids {
		list += fmt.Sprintf(" %d", pid)
	}
	script := fmt.Sprintf(`owner=%d; pids="%s"
while kill -0 $owner 2>/dev/null; do
  alive=""; for p in $pids; do kill -0 $p 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && exit 0
  sleep 1
done
kill -TERM $pids 2>/dev/null; sleep 5; kill -KILL $pids 2>/dev/null; exit 0`, os.Getpid(), list)
	cmd := exec.Command("/bin/sh", "-c", script)
	// Its own session: not in the test's process group, not killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start reaper: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
