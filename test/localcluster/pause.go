package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warmroute/warmroute/hack/images"
)

// buildPauseImage writes a docker-save archive of the sandbox image to
// out, built from cmd/pause. It runs as 65535, the user of
// registry.k8s.io/pause.
func buildPauseImage(ctx context.Context, out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(filepath.Dir(out), "pause")
	if err := images.BuildGo(ctx, root, "./test/localcluster/cmd/pause", "linux", runtime.GOARCH, bin); err != nil {
		return fmt.Errorf("build the pause binary: %w", err)
	}
	img, err := images.FromBinary(images.Spec{Ref: PauseImage, Binary: bin, User: "65535:65535"})
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	return images.WriteTarball(out, map[string]v1.Image{PauseImage: img})
}
