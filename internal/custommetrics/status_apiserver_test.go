package custommetrics

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/sidecar/router/flow"
	"github.com/warmroute/warmroute/test/localcluster"
)

// TestKubectlShowsShedding runs the scraper and the status publisher
// against a real API server with the generated CRD, and router pods whose
// metrics are real HTTP endpoints: the API server admits the new
// status.load members, `kubectl get llme -o wide` shows SHED/MIN (and the
// plain listing does not), the endpoint gets a Shedding Event when
// shedding starts and SheddingStopped when a quiet window has passed, and
// the tenants leave the status with it.
func TestKubectlShowsShedding(t *testing.T) {
	cfg := localcluster.APIServer(t, filepath.Join("..", "..", "config", "crd", "bases"))
	scheme := newScheme(t)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}); err != nil {
		t.Fatal(err)
	}
	ep := &v1alpha1.LLMEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "bot", Namespace: "ns"},
		Spec: v1alpha1.LLMEndpointSpec{
			Model:  v1alpha1.ModelSpec{Name: "m", URI: "org/m"},
			Router: v1alpha1.RouterSpec{FlowControl: &v1alpha1.FlowControl{Tenants: []v1alpha1.TenantFlowEntry{{Name: "team-a"}}}},
		},
	}
	if err := c.Create(ctx, ep); err != nil {
		t.Fatal(err)
	}
	picker, pickerSrv := flowRouter(t)
	_, followerSrv := flowRouter(t)
	for i, srv := range []string{pickerSrv.URL, followerSrv.URL} {
		p := pod("bot-router-"+string(rune('a'+i)), roleRouter, routerPortName, port(t, srv))
		p.Spec.Containers[0].Image = "router"
		status := p.Status
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = status
		p.Status.PodIPs = []corev1.PodIP{{IP: status.PodIP}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broadcaster.Shutdown)

	now := time.Unix(1_800_000_000, 0)
	store := NewStore()
	scraper := &Scraper{Reader: c, Store: store, HTTP: &http.Client{Timeout: 5 * time.Second}, now: func() time.Time { return now }}
	publisher := &StatusPublisher{Client: c, Store: store, Recorder: broadcaster.NewRecorder(scheme, "warmroute-operator")}
	name := types.NamespacedName{Namespace: "ns", Name: "bot"}
	pass := func() *v1alpha1.LoadStatus {
		t.Helper()
		if err := scraper.ScrapeOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if err := publisher.PublishOnce(ctx); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.LLMEndpoint
		if err := c.Get(ctx, name, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Load == nil {
			t.Fatal("no status.load written")
		}
		return got.Status.Load
	}
	kubeconfig := writeKubeconfig(t, cfg)
	kubectl := func(args ...string) []string {
		t.Helper()
		bin, err := localcluster.BinDir()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--namespace", "ns"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl %v printed %d lines, want a header and a row:\n%s", args, len(lines), out)
		}
		return lines
	}
	// column is a row's value under a header, by the header's offset: an
	// empty cell leaves no field of its own.
	column := func(lines []string, header string) string {
		t.Helper()
		at := strings.Index(lines[0], header)
		if at < 0 {
			t.Fatalf("no column %s in %q", header, lines[0])
		}
		if at >= len(lines[1]) {
			return ""
		}
		return strings.Fields(lines[1][at:])[0]
	}

	picker.Queued.WithLabelValues("team-a").Set(3)
	picker.Shed.WithLabelValues("team-a", "pressure").Add(40)
	st := pass()
	if st.Queued == nil || *st.Queued != 3 || st.ShedPerMinute != "" {
		t.Errorf("after one scrape: status.load = %+v, want 3 queued and no shed rate yet", st)
	}

	picker.Shed.WithLabelValues("team-a", "pressure").Add(18)
	picker.Shed.WithLabelValues(flow.DefaultName, "tenant_queue_full").Add(2)
	now = now.Add(time.Minute)
	st = pass()
	want := []v1alpha1.TenantShed{{Name: "team-a", PerMinute: "18.0"}, {Name: flow.DefaultName, PerMinute: "2.0"}}
	if st.ShedPerMinute != "20.0" || !slices.Equal(st.ShedTenants, want) {
		t.Errorf("shedding: status.load shed %q %+v, want 20.0 %+v", st.ShedPerMinute, st.ShedTenants, want)
	}
	wide := kubectl("get", "llmendpoint", "bot", "-o", "wide")
	t.Logf("kubectl get llmendpoint -o wide while shedding:\n%s", strings.Join(wide, "\n"))
	if got := column(wide, "SHED/MIN"); got != "20.0" {
		t.Errorf("kubectl -o wide: SHED/MIN %q, want 20.0:\n%s", got, strings.Join(wide, "\n"))
	}
	if plain := kubectl("get", "llmendpoint", "bot"); strings.Contains(plain[0], "SHED/MIN") {
		t.Errorf("SHED/MIN shows without -o wide:\n%s", strings.Join(plain, "\n"))
	}
	waitForEvent(ctx, t, clientset, ReasonShedding, corev1.EventTypeWarning, "20.0 requests/min (team-a 18.0, .default 2.0)")

	// Nothing more is shed: once the window has passed, the rate is 0 and
	// the tenants leave the status.
	now = now.Add(shedWindow + time.Minute)
	st = pass()
	if st.ShedPerMinute != "0.0" || st.ShedTenants != nil {
		t.Errorf("after a quiet window: status.load shed %q %+v, want 0.0 and no tenants", st.ShedPerMinute, st.ShedTenants)
	}
	if got := column(kubectl("get", "llmendpoint", "bot", "-o", "wide"), "SHED/MIN"); got != "0.0" {
		t.Errorf("kubectl -o wide after a quiet window: SHED/MIN %q, want 0.0", got)
	}
	waitForEvent(ctx, t, clientset, ReasonSheddingStopped, corev1.EventTypeNormal, "shed no request")
}

// waitForEvent waits until the endpoint has an Event of reason and type
// whose note contains text; the recorder sends events asynchronously.
func waitForEvent(ctx context.Context, t *testing.T, cs kubernetes.Interface, reason, eventType, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cs.EventsV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
			return e.Regarding.Kind == "LLMEndpoint" && e.Regarding.Name == "bot" &&
				e.Reason == reason && e.Type == eventType && strings.Contains(e.Note, text)
		}), nil
	})
	if err != nil {
		t.Fatalf("no %s Event %s containing %q on the endpoint (%v); events: %q", eventType, reason, text, err, seen)
	}
}

// writeKubeconfig writes an admin kubeconfig for cfg that kubectl accepts.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
