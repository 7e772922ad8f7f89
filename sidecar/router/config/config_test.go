package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

func doc(gen int, instances ...string) []byte {
	d := routingv1alpha1.Document{APIVersion: routingv1alpha1.APIVersion, Kind: routingv1alpha1.Kind, Model: "m", Generation: int64(gen)}
	for i, id := range instances {
		d.Instances = append(d.Instances, routingv1alpha1.Instance{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", 9000+i)})
	}
	d.Default()
	b, err := d.Encode()
	if err != nil {
		panic(err)
	}
	return b
}

type recorder struct {
	mu      sync.Mutex
	applied []int64
	results []string
}

func (r *recorder) loader() *Loader {
	return &Loader{
		Log: logr.Discard(),
		Apply: func(d *routingv1alpha1.Document) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.applied = append(r.applied, d.Generation)
			return nil
		},
		Observe: func(res string) { r.mu.Lock(); r.results = append(r.results, res); r.mu.Unlock() },
	}
}

func (r *recorder) last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.applied) == 0 {
		return -1
	}
	return r.applied[len(r.applied)-1]
}

func TestLoaderGoodBadIdentical(t *testing.T) {
	rec := &recorder{}
	l := rec.loader()
	for i, tc := range []struct {
		src  Source
		data []byte
		want string
		gen  int64
	}{
		{SourceFile, doc(1, "a"), Applied, 1},
		{SourceFile, doc(1, "a"), Unchanged, 1},
		{SourceFile, []byte(`{"apiVersion":"nope"}`), Rejected, 1},
		{SourceFile, []byte(`{not json`), Rejected, 1},
		{SourceFile, doc(2, "a", "b"), Applied, 2},
		{SourceAPI, doc(2, "a", "b"), Unchanged, 2},       // same content from the other source
		{SourceAPI, doc(3, "a", "b", "c"), Applied, 3},    // API now authoritative
		{SourceFile, doc(2, "a", "b", "x"), Unchanged, 3}, // lagging file ignored
	} {
		got, _ := l.Offer(tc.src, tc.data)
		if got != tc.want || rec.last() != tc.gen {
			t.Fatalf("step %d: %s with generation %d in force; want %s, %d", i, got, rec.last(), tc.want, tc.gen)
		}
	}
}

func TestLoaderApplyErrorKeepsLastGood(t *testing.T) {
	l := &Loader{Log: logr.Discard(), Apply: func(d *routingv1alpha1.Document) error {
		if d.Generation == 2 {
			return fmt.Errorf("unsupported")
		}
		return nil
	}}
	if r, _ := l.Offer(SourceFile, doc(1, "a")); r != Applied {
		t.Fatal(r)
	}
	if r, _ := l.Offer(SourceFile, doc(2, "a")); r != Rejected {
		t.Fatal(r)
	}
	if r, _ := l.Offer(SourceFile, doc(1, "a")); r != Unchanged {
		t.Fatalf("returning to the document in force: %s", r)
	}
}

// kubeletWrite updates a ConfigMap volume's one key as the kubelet does
// (AtomicWriter): the data in a new hidden version directory, the
// `..data` symlink swapped to it by renaming `..data_tmp` over it, the
// key a symlink through `..data`, the old version removed. test/node runs
// the router against a real kubelet's volume; this is for the watcher's
// unit tests.
func kubeletWrite(t *testing.T, dir string, data []byte) {
	t.Helper()
	version, err := os.MkdirTemp(dir, "..version_")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(version, routingv1alpha1.ConfigMapKey), data, 0o644); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(filepath.Base(version), filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, routingv1alpha1.ConfigMapKey)
	if _, err := os.Lstat(key); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", routingv1alpha1.ConfigMapKey), key); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// lastResult is what the loader made of the last document offered.
func (r *recorder) lastResult() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.results) == 0 {
		return ""
	}
	return r.results[len(r.results)-1]
}

// poll is how often the tests look; the deadlines are generous bounds for
// a loaded machine, and the figures they log are what to read.
const poll = 5 * time.Millisecond

func TestWatchFileFollowsSymlinkSwaps(t *testing.T) {
	dir := t.TempDir()
	kubeletWrite(t, dir, doc(1, "a"))
	rec := &recorder{}
	l := rec.loader()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A long poll, so only fsnotify can make the deadline below.
	g := NewWithT(t)
	go func() { _ = WatchFile(ctx, filepath.Join(dir, routingv1alpha1.ConfigMapKey), time.Minute, l) }()
	g.Eventually(rec.last, time.Second, poll).Should(Equal(int64(1)), "initial load")
	for gen := 2; gen <= 4; gen++ {
		kubeletWrite(t, dir, doc(gen, "a", "b"))
		start := time.Now()
		g.Eventually(rec.last, time.Second, poll).Should(Equal(int64(gen)), "generation %d", gen)
		t.Logf("generation %d applied %v after the symlink swap", gen, time.Since(start))
	}
	kubeletWrite(t, dir, []byte("{broken"))
	g.Eventually(rec.lastResult, time.Second, poll).Should(Equal(Rejected), "rejection")
	if rec.last() != 4 {
		t.Fatalf("generation %d in force after a bad document, want 4", rec.last())
	}
}

func TestWatchFilePollsWhenDirectoryAppearsLate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "late")
	rec := &recorder{}
	l := rec.loader()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = WatchFile(ctx, filepath.Join(dir, "routing.json"), 20*time.Millisecond, l) }()
	time.Sleep(50 * time.Millisecond)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "routing.json"), doc(7, "a"), 0o644); err != nil {
		t.Fatal(err)
	}
	NewWithT(t).Eventually(rec.last, 2*time.Second, poll).Should(Equal(int64(7)), "late directory")
}

func TestWatchConfigMap(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ep-routing"},
		Data: map[string]string{routingv1alpha1.ConfigMapKey: string(doc(1, "a"))}}
	client := fake.NewClientset(cm)
	rec := &recorder{}
	l := rec.loader()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := NewWithT(t)
	go func() { _ = WatchConfigMap(ctx, client, "ns", "ep-routing", l) }()
	g.Eventually(rec.last, 2*time.Second, poll).Should(Equal(int64(1)), "initial")
	cm = cm.DeepCopy()
	cm.Data[routingv1alpha1.ConfigMapKey] = string(doc(2, "a", "b"))
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g.Eventually(rec.last, 2*time.Second, poll).Should(Equal(int64(2)), "update")
	t.Logf("API update applied after %v", time.Since(start))
}

func TestParseConfigMapRef(t *testing.T) {
	for ref, ok := range map[string]bool{"ns/name": true, "name": false, "/x": false, "a/": false, "a/b/c": false} {
		if _, _, err := ParseConfigMapRef(ref); (err == nil) != ok {
			t.Errorf("%q: err %v", ref, err)
		}
	}
}
