package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/internal/inferencepool"
	"github.com/warmroute/warmroute/sidecar/router/epp"
	"github.com/warmroute/warmroute/test/harness"
	"github.com/warmroute/warmroute/test/localcluster"
)

// An endpoint in mode InferencePool: the operator's InferencePool and
// picker Service, the router pods as the picker only, and a request
// through the Endpoint Picker Protocol (go-control-plane's ext_proc
// client playing the Gateway's Envoy) forwarded to the simulator it picks.
const (
	poolEndpoint = "gw-chat"
	poolModel    = "gw-llama"
)

var _ = Describe("An endpoint in InferencePool mode", Ordered, func() {
	var ctx context.Context
	poolReady := func(g Gomega) *metav1.Condition {
		var ep servingv1alpha1.LLMEndpoint
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: poolEndpoint}, &ep)).To(Succeed())
		return meta.FindStatusCondition(ep.Status.Conditions, servingv1alpha1.ConditionInferencePoolReady)
	}

	BeforeAll(func() {
		ctx = suiteCtx
		ep := &servingv1alpha1.LLMEndpoint{
			ObjectMeta: metav1.ObjectMeta{Name: poolEndpoint, Namespace: namespace},
			Spec: servingv1alpha1.LLMEndpointSpec{
				Replicas: ptr.To(int32(3)),
				Model:    servingv1alpha1.ModelSpec{Name: poolModel, URI: "meta-llama/Llama-3.1-8B-Instruct", MaxModelLen: ptr.To(int32(16384))},
				Router:   servingv1alpha1.RouterSpec{Mode: servingv1alpha1.RouterModeInferencePool},
			},
		}
		By("creating an LLMEndpoint in mode InferencePool")
		Expect(env.Client.Create(ctx, ep)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
	})

	It("says when the InferencePool CRD is missing, and creates the pool once it is installed", func() {
		var pools inferencepool.InferencePoolList
		if err := env.Client.List(ctx, &pools); meta.IsNoMatchError(err) {
			Eventually(poolReady).WithTimeout(60 * time.Second).Should(And(Not(BeNil()),
				HaveField("Reason", servingv1alpha1.ReasonInferencePoolCRDMissing)))
			By("installing the InferencePool CRD (test/crds, written from the v1.0 schema)")
			root, err := localcluster.RepoRoot()
			Expect(err).NotTo(HaveOccurred())
			_, err = envtest.InstallCRDs(env.Cluster.Config, envtest.CRDInstallOptions{
				Paths: []string{filepath.Join(root, "test", "crds")}, ErrorIfPathMissing: true})
			Expect(err).NotTo(HaveOccurred())
		}
		// The operator looks again every 30 s while the API is missing.
		Eventually(poolReady).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", servingv1alpha1.ReasonInferencePoolApplied)))
		var pool inferencepool.InferencePool
		Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: poolEndpoint}, &pool)).To(Succeed())
		Expect(pool.Spec.TargetPorts).To(Equal([]inferencepool.Port{{Number: 8000}}))
		Expect(pool.Spec.EndpointPickerRef.Name).To(Equal(poolEndpoint + "-epp"))
		Expect(pool.Spec.EndpointPickerRef.Port).To(Equal(&inferencepool.Port{Number: 9002}))
	})

	It("runs the routers as the picker, and serves a request through the protocol on the picker Service", func() {
		Eventually(available(ctx, poolEndpoint)).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		By("running a router process per router pod: the picker only (--listen=, --epp-listen=:9002)")
		pods, err := env.StartRouterPods(ctx, poolEndpoint)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(pods.Stop)
		routers, err := pods.WaitReady(ctx, 2, 60*time.Second)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range routers {
			Expect(r.URL).To(BeEmpty(), "a picker-only router has no proxy")
			Expect(r.EPPAddr).To(HaveSuffix(":9002"))
		}

		// The vLLM pods the pool selects, by address.
		var vllm corev1.PodList
		Expect(env.Client.List(ctx, &vllm, client.InNamespace(namespace), client.MatchingLabels{
			"serving.warmroute.dev/endpoint": poolEndpoint, "serving.warmroute.dev/role": "vllm"})).To(Succeed())
		members := map[string]bool{}
		for _, p := range vllm.Items {
			members[net.JoinHostPort(p.Status.PodIP, "8000")] = true
		}

		By("resolving the picker Service " + poolEndpoint + "-epp to a ready endpoint on 9002, as the Gateway does")
		// The local cluster's pod IPs are loopback addresses, which the API
		// server refuses in the endpointslice controller's slices: the
		// harness publishes the Service's endpoints in its stead.
		mirrorCtx, stopMirror := context.WithCancel(ctx)
		DeferCleanup(stopMirror)
		Expect(harness.MirrorEndpointSlices(mirrorCtx, env.Kube, namespace, poolEndpoint+"-epp")).To(Succeed())
		var picker string
		Eventually(func(g Gomega) {
			var slices discoveryv1.EndpointSliceList
			g.Expect(env.Client.List(ctx, &slices, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: poolEndpoint + "-epp"})).To(Succeed())
			for _, s := range slices.Items {
				for _, p := range s.Ports {
					for _, e := range s.Endpoints {
						if ptr.Deref(p.Port, 0) == 9002 && ptr.Deref(e.Conditions.Ready, false) && len(e.Addresses) > 0 {
							picker = net.JoinHostPort(e.Addresses[0], "9002")
						}
					}
				}
			}
			g.Expect(picker).NotTo(BeEmpty(), "no ready endpoint of the picker Service yet")
		}).WithTimeout(30 * time.Second).Should(Succeed())

		cc, err := grpc.NewClient(picker, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cc.Close)
		processor := extprocv3.NewExternalProcessorClient(cc)

		// Until one router leads and both know it, a replica decides by its
		// fallback, whose placements the elected picker never saw: a
		// repeat could then land elsewhere for a reason this spec is not
		// about.
		Eventually(func(g Gomega) {
			g.Expect(leaderOf(routers)).To(BeNumerically(">=", 0), "no router leads, or several do")
			for _, r := range routers {
				g.Expect(harness.Metric(r, "warmroute_router_picker_known", nil)).To(BeNumerically("==", 1), "router %s does not know the picker yet", r.MetricsURL)
			}
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

		By("sending requests through ext_proc and forwarding each to the simulator the picker chose")
		prompt := func(i int) []byte {
			return []byte(fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"system","content":"You are the support bot of a bicycle shop; answer briefly and politely. %s"},{"role":"user","content":"question %d"}]}`,
				poolModel, string(bytes.Repeat([]byte("Policies and opening hours follow. "), 40)), i))
		}
		chosen := map[int]string{}
		for i := range 8 {
			// Each prompt twice: the second must find its prefix where the
			// first left it.
			dest, status, body := throughGateway(ctx, processor, prompt(i/2))
			Expect(status).To(Equal(http.StatusOK), "response %s", body)
			Expect(members).To(HaveKey(dest), "the picker chose %s, not one of the pool's pods %v", dest, members)
			Expect(string(body)).To(ContainSubstring(`"choices"`))
			if first, ok := chosen[i/2]; ok {
				Expect(dest).To(Equal(first), "the repeat of prompt %d left the instance that holds its prefix", i/2)
			}
			chosen[i/2] = dest
		}
		GinkgoWriter.Printf("instances chosen per prompt through the protocol: %v\n", chosen)
	})
})

// throughGateway plays Envoy for one chat request in FULL_DUPLEX_STREAMED
// mode: it sends the request headers and body to the picker, forwards the
// body the picker sends back to the endpoint it names, and streams the
// response through the picker. It returns the endpoint, the status and the
// response body.
func throughGateway(ctx context.Context, processor extprocv3.ExternalProcessorClient, body []byte) (string, int, []byte) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := processor.Process(ctx)
	Expect(err).NotTo(HaveOccurred())
	header := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	Expect(stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{header(":method", "POST"), header(":path", "/v1/chat/completions"),
			header("content-type", "application/json"), header("content-length", strconv.Itoa(len(body)))}}}}})).To(Succeed())
	half := len(body) / 2
	for i, c := range [][]byte{body[:half], body[half:]} {
		Expect(stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: c, EndOfStream: i == 1}}})).To(Succeed())
	}
	resp, err := stream.Recv()
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.GetImmediateResponse()).To(BeNil(), "the picker answered the request itself")
	fwd := http.Header{"Content-Type": {"application/json"}}
	mut := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	for _, k := range mut.GetRemoveHeaders() {
		fwd.Del(k)
	}
	var dest string
	for _, h := range mut.GetSetHeaders() {
		fwd.Set(h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
		if h.GetHeader().GetKey() == epp.DestinationHeader {
			dest = string(h.GetHeader().GetRawValue())
		}
	}
	Expect(dest).NotTo(BeEmpty(), "no %s header", epp.DestinationHeader)
	var sent []byte
	for {
		resp, err := stream.Recv()
		Expect(err).NotTo(HaveOccurred())
		piece := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		Expect(piece).NotTo(BeNil(), "expected a request body piece, got %v", resp)
		sent = append(sent, piece.GetBody()...)
		if piece.GetEndOfStream() {
			break
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+dest+"/v1/chat/completions", bytes.NewReader(sent))
	Expect(err).NotTo(HaveOccurred())
	req.Header = fwd
	hr, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer hr.Body.Close()
	out, err := io.ReadAll(hr.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{header(":status", strconv.Itoa(hr.StatusCode))}}}}})).To(Succeed())
	_, err = stream.Recv()
	Expect(err).NotTo(HaveOccurred())
	Expect(stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: out, EndOfStream: true}}})).To(Succeed())
	resp, err = stream.Recv()
	Expect(err).NotTo(HaveOccurred())
	back := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()
	Expect(stream.CloseSend()).To(Succeed())
	_, err = stream.Recv()
	Expect(errors.Is(err, io.EOF)).To(BeTrue(), "the stream did not end: %v", err)
	return dest, hr.StatusCode, back
}
