// Package gobuild compiles the project's own commands for the tests, the
// demo and the benchmark, so that each runs exactly the code in the checkout.
package gobuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot is the directory of the warmroute go.mod enclosing the working
// directory.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("find module root: not inside the warmroute module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles the package pkg (relative to the module root, such as
// "./sidecar/cmd/router") into the file out, with the given build flags.
func Build(ctx context.Context, pkg, out string, flags ...string) error {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
