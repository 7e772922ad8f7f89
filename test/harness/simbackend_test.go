package harness

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmroute/warmroute/test/vllmsim"
)

// TestSimFactoryStartsOnlyWhatVLLMWould: a vLLM container the pinned
// release would exit on gets no simulator (the pod never serves, and the
// error names the argument); one it accepts gets a simulator configured
// from its arguments.
func TestSimFactoryStartsOnlyWhatVLLMWould(t *testing.T) {
	pod := func(args ...string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: vllmContainer, Command: []string{"vllm", "serve"}, Args: args},
		}}}
	}
	start := SimFactory(vllmsim.Config{}, &SimRegistry{})

	_, err := start(pod("org/m", "--served-model-name=m", "--shutdown-timeout=30", "--no-such-flag"), "127.0.0.1:0")
	var usage *vllmsim.UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "unrecognized arguments: --no-such-flag") {
		t.Fatalf("bad flag: %v, want vLLM's refusal", err)
	}

	b, err := start(pod("org/m", "--served-model-name", "chat", "--max-loras=3", "--shutdown-timeout", "30"), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Kill()
	cfg := b.(simBackend).srv.Config()
	if cfg.Model != "chat" || cfg.MaxLoRAs != 3 || cfg.ShutdownTimeout.Seconds() != 30 {
		t.Errorf("simulator model %q, max loras %d, shutdown timeout %s; want chat, 3, 30s", cfg.Model, cfg.MaxLoRAs, cfg.ShutdownTimeout)
	}
}
