/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package images

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildGo builds the Go main package pkg of the module in moduleDir as a
// static binary for goos/goarch, written to out. pkg is a path inside
// moduleDir ("./cmd") or a package path that moduleDir's go.mod resolves
// ("registry.k8s.io/pause" if required there). Each ldflags element is one
// linker flag token ("-X", "main.version=1.0"); they follow "-s -w".
//
// The binary is reproducible: cgo is off (no libc, so it runs on an empty
// base), -trimpath drops the build machine's paths, and VCS stamping is off
// so that a dirty and a clean checkout of the same source give the same
// bytes. It uses the caller's Go build cache.
func BuildGo(ctx context.Context, moduleDir, pkg, goos, goarch, out string, ldflags ...string) error {
	if pkg == "" || goos == "" || goarch == "" || out == "" {
		return fmt.Errorf("build Go package %q for %s/%s to %q: package, GOOS, GOARCH and output are required", pkg, goos, goarch, out)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("build %s for %s/%s: %w", pkg, goos, goarch, err)
	}
	flags := append([]string{"-s", "-w"}, ldflags...)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags="+strings.Join(flags, " "), "-o", out, pkg)
	cmd.Dir = moduleDir
	// GOFLAGS from the environment could add -race (which needs cgo) or
	// -buildvcs=true and break the guarantees above.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s in %s: %w\n%s", pkg, goos, goarch, moduleDir, err, strings.TrimSpace(stderr.String()))
	}
	// go build -o of a package that is not main writes its archive.
	f, err := os.Open(out)
	if err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w", pkg, goos, goarch, err)
	}
	defer func() { _ = f.Close() }()
	magic := make([]byte, len(archiveMagic))
	if _, err := io.ReadFull(f, magic); err == nil && string(magic) == archiveMagic {
		return fmt.Errorf("go build %s for %s/%s: not a main package", pkg, goos, goarch)
	}
	return nil
}

const archiveMagic = "!<arch>\n"
