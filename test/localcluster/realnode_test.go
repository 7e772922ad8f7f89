package localcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestRealNodeLeavesNothing starts a real-node cluster, runs a pod on it
// (a real container with an IP from the bridge), stops the cluster, and
// checks that the host is as before: no process in the cluster's network
// namespace or cgroups, the same mounts, network links, named network
// namespaces and iptables rules, and no cgroup of the cluster left.
func TestRealNodeLeavesNothing(t *testing.T) {
	if missing := RealNodeMissing(); missing != "" {
		t.Skip(missing)
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	before := hostSnapshot(t)
	c, err := Start(ctx, Options{BinDir: bin, RealNode: true, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	node := c.node

	cs := kubernetes.NewForConfigOrDie(c.Config)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ip string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		ip = p.Status.PodIP
		return true, nil
	}); err != nil {
		t.Fatalf("pod not Running within a minute (see %s): %v", filepath.Join(c.WorkDir, "kubelet.log"), err)
	}
	t.Logf("pod Running at %s %.1fs after it was created", ip, time.Since(start).Seconds())
	if !strings.HasPrefix(ip, "10.244.0.") {
		t.Errorf("pod IP %s is not from the bridge's subnet %s", ip, PodSubnet)
	}
	owned := node.processes()
	if len(owned) < 10 {
		t.Errorf("found %d processes of the cluster, want at least 10 (components, shim, pause containers): %v", len(owned), owned)
	}

	start = time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("teardown took %.1fs", time.Since(start).Seconds())

	if left := node.processes(); len(left) > 0 {
		t.Errorf("processes of the cluster left: %v", left)
	}
	for _, ctrl := range cgroupControllers {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, node.cgroupRoot)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left in %s (stat: %v)", node.cgroupRoot, ctrl, err)
		}
	}
	after := hostSnapshot(t)
	for what, b := range before {
		if a := after[what]; !slices.Equal(a, b) {
			t.Errorf("%s changed:\nbefore: %q\nafter:  %q", what, b, a)
		}
	}
}

// hostSnapshot reads what a cluster must not leave behind, each as a
// sorted list.
func hostSnapshot(t *testing.T) map[string][]string {
	t.Helper()
	s := map[string][]string{}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mounts)), "\n") {
		// mount ID, parent ID, major:minor, root, mount point, ...
		if f := strings.Fields(line); len(f) > 4 {
			s["mounts"] = append(s["mounts"], f[3]+" on "+f[4])
		}
	}
	links := run(t, "ip", "-o", "link", "show")
	for _, line := range strings.Split(strings.TrimSpace(links), "\n") {
		// "2: eth0: <...>": the index and name.
		if f := strings.Fields(line); len(f) > 1 {
			s["network links"] = append(s["network links"], f[0]+" "+f[1])
		}
	}
	s["named network namespaces"] = strings.Fields(run(t, "ip", "netns", "list"))
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	for _, line := range strings.Split(run(t, "iptables-save"), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			s["iptables rules"] = append(s["iptables rules"], counters.ReplaceAllString(line, ""))
		}
	}
	for _, ctrl := range cgroupControllers {
		entries, err := os.ReadDir(filepath.Join("/sys/fs/cgroup", ctrl))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				s["cgroups"] = append(s["cgroups"], ctrl+"/"+e.Name())
			}
		}
	}
	for k := range s {
		slices.Sort(s[k])
	}
	return s
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// testLog sends the cluster's phases to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
