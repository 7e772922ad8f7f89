package vllmsim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// goldenVLLMContainers are the vllm containers of the operator's golden
// Deployments, by file name.
func goldenVLLMContainers(t *testing.T) map[string]corev1.Container {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "controllers", "testdata", "vllm-deployment", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden Deployments (%v)", err)
	}
	out := map[string]corev1.Container{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "vllm" })
		if i < 0 {
			t.Fatalf("%s: no vllm container", f)
		}
		out[filepath.Base(f)] = d.Spec.Template.Spec.Containers[i]
	}
	return out
}

// TestPinnedReleaseParsesGoldenDeployments: every vLLM container the
// operator builds (its golden Deployments) starts with the pinned release:
// `vllm serve` accepts its arguments.
func TestPinnedReleaseParsesGoldenDeployments(t *testing.T) {
	cli := PinnedServeCLI()
	for name, c := range goldenVLLMContainers(t) {
		if !slices.Equal(c.Command, []string{"vllm", "serve"}) {
			t.Errorf("%s: command %q, want vllm serve", name, c.Command)
			continue
		}
		args, err := cli.Parse(c.Args)
		if err != nil {
			t.Errorf("%s: vLLM %s would exit: %v", name, cli.Release, err)
			continue
		}
		if args.Model == "" {
			t.Errorf("%s: no model", name)
		}
		for _, flag := range []string{"--shutdown-timeout", "--prefix-caching-hash-algo", "--enable-prefix-caching"} {
			if _, ok := args.Value(flag); !ok {
				t.Errorf("%s: %s not set", name, flag)
			}
		}
	}
}

// TestPinBites: the operator's default Deployment does not start with
// vLLM v0.11.0 (the default image before the pin moved), which has no
// --shutdown-timeout; the same parser, given that release's arguments,
// refuses it as v0.11.0 would.
func TestPinBites(t *testing.T) {
	old, err := LoadServeCLI("v0.11.0")
	if err != nil {
		t.Fatal(err)
	}
	c := goldenVLLMContainers(t)["defaults.yaml"]
	_, err = old.Parse(c.Args)
	const want = "vllm serve: error: unrecognized arguments: --shutdown-timeout=160"
	if err == nil || err.Error() != want {
		t.Fatalf("v0.11.0 parsing the default Deployment's arguments: %v, want %q", err, want)
	}
}

func TestServeCLIParsesAsArgparse(t *testing.T) {
	cli := PinnedServeCLI()
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
		want    map[string]string
	}{
		{name: "both spellings and underscores",
			args: []string{"m", "--port", "9000", "--shutdown_timeout=30", "-tp", "2", "--max-lora-rank", "64"},
			want: map[string]string{"--port": "9000", "--shutdown-timeout": "30", "--tensor-parallel-size": "2", "--max-lora-rank": "64"}},
		{name: "last wins, --no- form",
			args: []string{"m", "--enable-prefix-caching", "--no-enable-prefix-caching", "--port=1", "--port=2"},
			want: map[string]string{"--enable-prefix-caching": "false", "--port": "2"}},
		{name: "human-readable ints", args: []string{"m", "--max-model-len=32K", "--max-num-batched-tokens", "16k"},
			want: map[string]string{"--max-model-len": "32768", "--max-num-batched-tokens": "16000"}},
		{name: "model as option", args: []string{"--model", "m", "--served-model-name", "a", "b"},
			want: map[string]string{"--served-model-name": "b"}},
		{name: "unknown flags, all of them", args: []string{"m", "--bogus=1", "--port=8000", "--nope", "x"},
			wantErr: "vllm serve: error: unrecognized arguments: --bogus=1 --nope x"},
		{name: "abbreviation refused", args: []string{"m", "--shutdown=3"},
			wantErr: "vllm serve: error: unrecognized arguments: --shutdown=3"},
		{name: "not an int", args: []string{"m", "--port", "http"},
			wantErr: "vllm serve: error: argument --port: invalid int value: 'http'"},
		{name: "not a choice", args: []string{"m", "--prefix-caching-hash-algo=md5"},
			wantErr: "vllm serve: error: argument --prefix-caching-hash-algo: invalid choice: 'md5' (choose from sha256, sha256_cbor, xxhash, xxhash_cbor)"},
		{name: "int not a choice", args: []string{"m", "--max-lora-rank=10"},
			wantErr: "vllm serve: error: argument --max-lora-rank: invalid choice: 10 (choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)"},
		{name: "value for a switch", args: []string{"m", "--enable-lora=yes"},
			wantErr: "vllm serve: error: argument --enable-lora/--no-enable-lora: ignored explicit argument 'yes'"},
		{name: "missing value", args: []string{"m", "--shutdown-timeout", "--port=1"},
			wantErr: "vllm serve: error: argument --shutdown-timeout: expected one argument"},
		{name: "negative number is a value", args: []string{"m", "--max-model-len", "-1"},
			want: map[string]string{"--max-model-len": "-1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args, err := cli.Parse(tt.args)
			if tt.wantErr != "" {
				var usage *UsageError
				if !errors.As(err, &usage) || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if args.Model != "m" {
				t.Errorf("model %q, want m", args.Model)
			}
			for flag, want := range tt.want {
				if got, _ := args.Value(flag); got != want {
					t.Errorf("%s = %q, want %q", flag, got, want)
				}
			}
		})
	}
}
