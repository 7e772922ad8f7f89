package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one control-plane binary started by the cluster. It runs in its
// own process group and is killed if the test process dies, so a crashed test
// leaves nothing behind.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

func startProcess(name, bin string, args []string, logDir string) (*process, error) {
	logf, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended (and how), without blocking.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop asks the process group to end, and kills it if it has not within the
// grace period. It returns only once the process is gone.
func (p *process) stop(grace time.Duration) error {
	if ok, _ := p.exited(); ok {
		return nil
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid())
	}
}

// processAlive reports whether a pid still names a live (non-zombie) process.
func processAlive(pid int) bool {
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

// killAndWaitSignal sends SIGTERM, then SIGKILL after grace, and waits for
// the pid to disappear.
func killAndWaitSignal(pid int, grace time.Duration) {
	if !processAlive(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if processAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 100 && processAlive(pid); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
}
