package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/warmroute/warmroute/test/gobuild"
)

// Binaries are the project's own commands, built fresh for a run so that
// the tests exercise exactly the code in the checkout.
type Binaries struct {
	Operator string
	Router   string
}

// BuildBinaries compiles the operator and the router into dir.
func BuildBinaries(ctx context.Context, dir string, progress func(string)) (Binaries, error) {
	b := Binaries{Operator: filepath.Join(dir, "warmroute-operator"), Router: filepath.Join(dir, "warmroute-router")}
	for _, t := range []struct{ out, pkg string }{
		{b.Operator, "./cmd"},
		{b.Router, "./sidecar/cmd/router"},
	} {
		start := time.Now()
		progress(fmt.Sprintf("building %s", t.pkg))
		if err := gobuild.Build(ctx, t.pkg, t.out); err != nil {
			return b, err
		}
		progress(fmt.Sprintf("built %s in %s", t.pkg, time.Since(start).Round(time.Millisecond)))
	}
	return b, nil
}
