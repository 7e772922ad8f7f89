package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warmroute/warmroute/test/vllmsim"
	"github.com/warmroute/warmroute/webhooks"
)

// TestVLLMImagePinnedOnce: the default vLLM image is named in one place.
// Its tag is the release the simulator's command line comes from, it is
// not older than the oldest release the operator supports, and every
// manifest that installs the operator (config/manager, and the Helm chart
// and OLM bundle generated from it) names the same image.
// otherTag finds every vLLM image tag a manifest names.
var otherTag = regexp.MustCompile(`vllm/vllm-openai:(\S+)`)

func TestVLLMImagePinnedOnce(t *testing.T) {
	repo, tag, ok := strings.Cut(defaultVLLMImage, ":")
	if !ok {
		t.Fatalf("default vLLM image %q has no tag", defaultVLLMImage)
	}
	if tag != vllmsim.PinnedRelease {
		t.Errorf("default vLLM image %s, but the simulator speaks vLLM %s: move both (docs/install.md)", defaultVLLMImage, vllmsim.PinnedRelease)
	}
	if older, known := webhooks.OlderThanSupported(defaultVLLMImage); !known || older {
		t.Errorf("default vLLM image %s is not a known release at least %s", defaultVLLMImage, webhooks.OldestVLLMRelease)
	}
	csvs, _ := filepath.Glob(filepath.Join("..", "bundle", "manifests", "*.clusterserviceversion.yaml"))
	if len(csvs) != 1 {
		t.Fatalf("want one CSV in bundle/manifests, found %v", csvs)
	}
	for _, c := range []struct{ file, want string }{
		{filepath.Join("..", "config", "manager", "manager.yaml"), "value: " + defaultVLLMImage + "\n"},
		{csvs[0], "value: " + defaultVLLMImage + "\n"},
		{csvs[0], "image: " + defaultVLLMImage + "\n"},
		{filepath.Join("..", "dist", "chart", "values.yaml"), "repository: " + repo + "\n    tag: " + tag + "\n"},
	} {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), c.want) {
			t.Errorf("%s does not name the default vLLM image (%q); run make bundle chart after editing config/manager", c.file, c.want)
		}
		for _, m := range otherTag.FindAllStringSubmatch(string(data), -1) {
			if m[1] != tag {
				t.Errorf("%s names vllm-openai:%s besides the default %s", c.file, m[1], tag)
			}
		}
	}
}
