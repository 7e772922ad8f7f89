package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain runs the command itself when re-executed by a test, so that a
// test sees its exit status and stderr as a container would.
func TestMain(m *testing.M) {
	if os.Getenv("VLLMSIM_RUN_MAIN") == "1" {
		os.Args = append([]string{"vllmsim"}, strings.Fields(os.Getenv("VLLMSIM_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestServeExitsAsVLLM: `vllmsim serve` refuses what the pinned vLLM
// refuses, with argparse's status and message, before serving anything.
func TestServeExitsAsVLLM(t *testing.T) {
	for args, want := range map[string]string{
		"serve m --port=0 --no-such-flag=1 extra":  "vllm serve: error: unrecognized arguments: --no-such-flag=1 extra\n",
		"serve m --port 0 --max-lora-rank 10":      "vllm serve: error: argument --max-lora-rank: invalid choice: 10 (choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)\n",
		"serve m --port=0 --shutdown-timeout=soon": "vllm serve: error: argument --shutdown-timeout: invalid int value: 'soon'\n",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "VLLMSIM_RUN_MAIN=1", "VLLMSIM_ARGS="+args)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit status 2", args, err)
		}
		if stderr.String() != want {
			t.Errorf("%s: stderr %q, want %q", args, stderr.String(), want)
		}
	}
}

func TestServeArgsMapToTheSimulator(t *testing.T) {
	got, err := serveArgs(strings.Fields("org/m --host 127.0.0.1 --port=8001 --served-model-name chat alias --max-loras 4 --shutdown-timeout=30 --api-key k1 k2 --enable-prefix-caching"))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, " ")
	for _, want := range []string{"--listen 127.0.0.1:8001", "--model chat", "--max-loras 4", "--shutdown-timeout 30", "--api-key k1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("%q lacks %q", joined, want)
		}
	}
}

// TestModelLoadDelay: while the model loads nothing listens (as with
// vLLM), then /health answers; the delay comes from the environment under
// a `vllm serve` command line.
func TestModelLoadDelay(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VLLMSIM_RUN_MAIN=1", "VLLMSIM_ARGS=serve m --host 127.0.0.1 --port "+port,
		modelLoadDelayEnv+"=1s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	start := time.Now()
	var loading, served bool
	for time.Since(start) < 20*time.Second && !served {
		resp, err := http.Get("http://" + addr + "/health")
		switch {
		case err != nil && time.Since(start) < 900*time.Millisecond:
			loading = true
		case err == nil:
			resp.Body.Close()
			served = resp.StatusCode == http.StatusOK
			if served && time.Since(start) < time.Second {
				t.Fatalf("served after %s, before the load delay", time.Since(start))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !loading || !served {
		t.Fatalf("refused while loading: %v; served after: %v", loading, served)
	}
}
