package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmroute/warmroute/test/process"
)

// TestKilledOwnerLeavesNothing kills (SIGKILL, no cleanup at all) a process
// that started a cluster, as `go test -timeout` does to a stuck test, and
// checks that every process of the cluster goes with it.
func TestKilledOwnerLeavesNothing(t *testing.T) {
	if os.Getenv("WARMROUTE_CLUSTER_OWNER") == "1" {
		runOwner()
		return
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledOwnerLeavesNothing$")
	cmd.Env = append(os.Environ(), "WARMROUTE_CLUSTER_OWNER=1", "KUBEBUILDER_ASSETS="+bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			if err := json.Unmarshal([]byte(line), &pids); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if len(pids) != 5 {
		t.Fatalf("owner reported pids %v, want 5", pids)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var alive []int
		for _, pid := range pids {
			if process.Alive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range alive {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes %v outlived the killed owner", alive)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runOwner starts a full cluster, reports its pids and waits to be killed.
func runOwner() {
	opts := Full()
	opts.PodCIDR = "127.8.0.1/16"
	c, err := Start(context.Background(), opts)
	if err != nil {
		_, _ = os.Stdout.WriteString("ERROR " + err.Error() + "\n")
		os.Exit(1)
	}
	b, _ := json.Marshal(c.PIDs())
	_, _ = os.Stdout.WriteString("PIDS " + string(b) + "\n")
	select {}
}
