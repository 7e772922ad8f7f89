package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Binaries are the project's own commands, built fresh for a run so that
// the tests exercise exactly the code in the checkout.
type Binaries struct {
	Operator string
	Router   string
}

// BuildBinaries compiles the operator and the router into dir.
func BuildBinaries(repoRoot, dir string, progress func(string)) (Binaries, error) {
	b := Binaries{Operator: filepath.Join(dir, "warmroute-operator"), Router: filepath.Join(dir, "warmroute-router")}
	for _, t := range []struct{ out, pkg string }{
		{b.Operator, "./cmd"},
		{b.Router, "./sidecar/cmd/router"},
	} {
		start := time.Now()
		if progress != nil {
			progress(fmt.Sprintf("building %s", t.pkg))
		}
		cmd := exec.Command("go", "build", "-o", t.out, t.pkg)
		cmd.Dir = repoRoot
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return b, fmt.Errorf("go build %s: %w", t.pkg, err)
		}
		if progress != nil {
			progress(fmt.Sprintf("built %s in %s", t.pkg, time.Since(start).Round(time.Millisecond)))
		}
	}
	return b, nil
}
