package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warmroute/warmroute/hack/images"
)

// buildNodeImages writes a docker-save archive of the images the node
// runs before any test's: the sandbox image, built from cmd/pause and
// running as 65535 (the user of registry.k8s.io/pause), and CoreDNS from
// nodeBin.
func buildNodeImages(ctx context.Context, out, nodeBin string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(filepath.Dir(out), "pause")
	if err := images.BuildGo(ctx, root, "./test/localcluster/cmd/pause", "linux", runtime.GOARCH, bin); err != nil {
		return fmt.Errorf("build the pause binary: %w", err)
	}
	pause, err := images.FromBinary(images.Spec{Ref: PauseImage, Binary: bin, User: "65535:65535"})
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	coredns, err := images.FromBinary(images.Spec{Ref: CoreDNSImage, Binary: filepath.Join(nodeBin, "coredns")})
	if err != nil {
		return fmt.Errorf("CoreDNS image: %w", err)
	}
	return images.WriteTarball(out, map[string]v1.Image{PauseImage: pause, CoreDNSImage: coredns})
}
