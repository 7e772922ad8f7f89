// Command localcluster starts and stops the local development cluster:
//
//	localcluster up   [--workdir DIR] [--nodes N] [--gpus-per-node N]
//	localcluster down [--workdir DIR]
//
// `up` runs in the foreground until interrupted (Ctrl-C) or until `down` is
// run from another shell; either way every process it started is stopped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/warmroute/warmroute/test/localcluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: localcluster up|down [--workdir DIR]")
	os.Exit(2)
}

func defaultWorkDir() string {
	if root, err := localcluster.RepoRoot(); err == nil {
		return filepath.Join(root, "tmp", "localcluster")
	}
	return filepath.Join(os.TempDir(), "warmroute-localcluster")
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	workDir := fs.String("workdir", defaultWorkDir(), "directory for the kubeconfig, logs and state")
	nodes := fs.Int("nodes", 2, "fake GPU nodes")
	gpus := fs.Int("gpus-per-node", 8, "nvidia.com/gpu capacity per node")
	realNode := fs.Bool("real-node", false, "one real kubelet node in namespaces of its own instead of the fake GPU nodes (needs root)")
	_ = fs.Parse(args)
	if *realNode {
		if missing := localcluster.RealNodeMissing(); missing != "" {
			return errors.New(missing)
		}
	}

	if _, err := os.Stat(filepath.Join(*workDir, "state.json")); err == nil {
		return fmt.Errorf("a cluster already runs from %s; run `localcluster down --workdir %s` first", *workDir, *workDir)
	}
	bin, err := localcluster.BinDir()
	if err != nil {
		return err
	}
	opts := localcluster.Full()
	opts.BinDir, opts.WorkDir, opts.Nodes, opts.GPUsPerNode, opts.RealNode = bin, *workDir, *nodes, *gpus, *realNode
	if root, err := localcluster.RepoRoot(); err == nil {
		opts.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "bases")}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("stopping the local cluster")
		_ = c.Stop()
		_ = os.Remove(filepath.Join(*workDir, "state.json"))
	}()
	if *realNode {
		fmt.Printf("local cluster up in %s: one real node, pods on %s\n", time.Since(start).Round(time.Millisecond), localcluster.PodSubnet)
	} else {
		fmt.Printf("local cluster up in %s: %d fake GPU nodes, pods on %s\n", time.Since(start).Round(time.Millisecond), opts.Nodes, opts.PodCIDR)
	}
	fmt.Printf("  export KUBECONFIG=%s\n  kubectl get nodes\n", c.KubeconfigPath)
	fmt.Printf("stop with Ctrl-C or `make demo-down`; logs in %s\n", *workDir)
	<-ctx.Done()
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	workDir := fs.String("workdir", defaultWorkDir(), "directory the cluster was started with")
	_ = fs.Parse(args)
	state := filepath.Join(*workDir, "state.json")
	if _, err := os.Stat(state); os.IsNotExist(err) {
		fmt.Println("no local cluster is running from", *workDir)
		return nil
	}
	if err := localcluster.StopFromState(state); err != nil {
		return err
	}
	fmt.Println("local cluster stopped")
	return nil
}
