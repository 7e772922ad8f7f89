package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/test/promscrape"
)

// The operator runs as its own ServiceAccount with config/default's RBAC
// and webhook configurations (test/harness/install.go): these specs go
// through the API server to its webhooks as a user's kubectl does.
var _ = Describe("The installed admission webhooks", func() {
	var ctx context.Context
	BeforeEach(func() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(suiteCtx, 2*time.Minute)
		DeferCleanup(cancel)
		if env.Kubectl() == "" {
			Fail("no kubectl: hack/build-controlplane.sh builds one")
		}
	})

	// kubectl runs kubectl as the cluster's administrator with manifest on
	// its standard input, and returns its standard output and error apart
	// (warnings go to the error stream).
	kubectl := func(manifest string, args ...string) (stdout, stderr string, err error) {
		cmd := exec.CommandContext(ctx, env.Kubectl(), append([]string{"--kubeconfig", env.Cluster.KubeconfigPath, "--namespace", namespace}, args...)...)
		cmd.Stdin = bytes.NewBufferString(manifest)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	// rejections counts the requests the API server says the validating
	// webhook refused.
	rejections := func() float64 {
		stdout, stderr, err := kubectl("", "get", "--raw", "/metrics")
		Expect(err).NotTo(HaveOccurred(), stderr)
		families, err := promscrape.Parse(strings.NewReader(stdout))
		Expect(err).NotTo(HaveOccurred())
		return promscrape.Sum(families["apiserver_admission_webhook_rejection_count"],
			map[string]string{"name": "vllmendpoint-v1alpha1.serving.warmroute.dev", "type": "validating"})
	}
	endpoint := func(name, model string) string {
		return `apiVersion: serving.warmroute.dev/v1alpha1
kind: LLMEndpoint
metadata:
  name: ` + name + `
spec:
  replicas: 3
  model:
    name: llama
    uri: ` + model + `
    gpus: 2
`
	}

	It("refuses what the CRD's rules let through, with the validating webhook's message", func() {
		manifest := endpoint("over-limit", "meta-llama/Llama-3.1-8B-Instruct") + `    resources:
      requests:
        memory: 32Gi
      limits:
        memory: 24Gi
`
		before := rejections()
		_, stderr, err := kubectl(manifest, "apply", "-f", "-")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(ContainSubstring(`The LLMEndpoint "over-limit" is invalid: spec.model.resources.requests[memory]: Invalid value: "32Gi": must not exceed the limit 24Gi`))
		// The webhook's Invalid status reaches kubectl as it is, so the
		// API server's own count says who refused it.
		Expect(rejections()).To(Equal(before+1), "refusals by the validating webhook, per the API server")
		err = env.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: "over-limit"}, &servingv1alpha1.LLMEndpoint{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the refused endpoint exists: %v", err)
	})

	It("fills in the derived defaults with the mutating webhook", func() {
		stdout, stderr, err := kubectl(endpoint("defaulted", "meta-llama/Llama-3.1-8B-Instruct"), "create", "--dry-run=server", "-o", "json", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		var got servingv1alpha1.LLMEndpoint
		Expect(json.Unmarshal([]byte(stdout), &got)).To(Succeed())
		// None of these has a default in the CRD's schema: the webhook
		// derives them from spec.model.gpus and spec.replicas.
		Expect(got.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(*servingv1alpha1.DefaultTensorParallelSize(&got))))
		Expect(got.Spec.Model.TensorParallelSize).To(HaveValue(BeEquivalentTo(2)))
		Expect(got.Spec.Routing.PrefixAware.ConcurrencyThreshold).To(HaveValue(BeEquivalentTo(servingv1alpha1.DefaultConcurrencyThreshold(&got))))
		Expect(got.Spec.Router.Replicas).To(HaveValue(BeEquivalentTo(servingv1alpha1.DefaultRouterReplicas(&got))))
	})

	It("looks up a referenced claim with the operator's own permissions, and warns that it is missing", func() {
		_, stderr, err := kubectl(endpoint("on-claim", "pvc://missing-weights/llama"), "create", "--dry-run=server", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), stderr)
		// "could not check" would mean the operator may not get claims.
		Expect(stderr).To(ContainSubstring("Warning: spec.model.uri: PersistentVolumeClaim " + namespace + "/missing-weights does not exist"))
	})
})

// config/admission is installed with the rest (as `make deploy` does); the
// operator reads its policy and binding with the permissions config/rbac
// gives it, limited to that name.
var _ = Describe("The LoRA agent's admission policy", func() {
	It("is reported on an endpoint with LoRA, and its absence too, with a Warning event", func() {
		ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
		DeferCleanup(cancel)
		ep := &servingv1alpha1.LLMEndpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "lora-policy"},
			Spec: servingv1alpha1.LLMEndpointSpec{
				Replicas: ptr.To[int32](0), // no pods: only the condition matters here
				Model:    servingv1alpha1.ModelSpec{Name: "llama", URI: "meta-llama/Llama-3.1-8B-Instruct", MaxLoras: ptr.To[int32](2)},
			},
		}
		Expect(env.Client.Create(ctx, ep)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(env.Client.Delete(suiteCtx, ep))).To(Succeed()) })
		confined := func(g Gomega) *metav1.Condition {
			got := &servingv1alpha1.LLMEndpoint{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ep), got)).To(Succeed())
			return meta.FindStatusCondition(got.Status.Conditions, servingv1alpha1.ConditionLoRAAgentConfined)
		}
		Eventually(confined).WithTimeout(time.Minute).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", servingv1alpha1.ReasonAdmissionPolicyInstalled)))

		By("without the binding the policy confines nothing, and the endpoint says so")
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: "warmroute-lora-agent"}, binding)).To(Succeed())
		Expect(env.Client.Delete(ctx, binding)).To(Succeed())
		DeferCleanup(func() {
			restored := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
				ObjectMeta: metav1.ObjectMeta{Name: binding.Name, Labels: binding.Labels}, Spec: binding.Spec,
			}
			Expect(client.IgnoreAlreadyExists(env.Client.Create(suiteCtx, restored))).To(Succeed())
		})
		Eventually(confined).WithTimeout(time.Minute).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", servingv1alpha1.ReasonAdmissionPolicyMissing)))
		Eventually(func(g Gomega) []string {
			var events eventsv1.EventList
			g.Expect(env.Client.List(ctx, &events, client.InNamespace(namespace))).To(Succeed())
			var warnings []string
			for _, e := range events.Items {
				if e.Regarding.Name == ep.Name && e.Type == corev1.EventTypeWarning {
					warnings = append(warnings, e.Reason)
				}
			}
			return warnings
		}).WithTimeout(time.Minute).Should(ContainElement(servingv1alpha1.ReasonAdmissionPolicyMissing))
	})
})

// The operator serves its metrics as config/default does: over HTTPS, to
// callers the API server says may get /metrics (TokenReview and
// SubjectAccessReview, which config/rbac's metrics-auth-role lets it make).
var _ = Describe("The operator's metrics endpoint", func() {
	It("serves a ServiceAccount bound to warmroute-metrics-reader and refuses one that is not", func() {
		ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
		DeferCleanup(cancel)
		token := func(name string) string {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
			Expect(env.Client.Create(ctx, sa)).To(Succeed())
			DeferCleanup(func() { _ = env.Client.Delete(suiteCtx, sa) })
			tr, err := env.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-scraper"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "warmroute-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: "scraper"}},
		}
		Expect(env.Client.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() { _ = env.Client.Delete(suiteCtx, binding) })
		scraper, stranger := token("scraper"), token("stranger")

		// The certificate is the self-signed one controller-runtime makes
		// without a metrics certificate, as config/default runs it.
		httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		scrape := func(token string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.OperatorMetricsURL, nil)
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := httpClient.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		// The API server's authorizer sees the new binding within a moment;
		// the operator caches a refusal for 30 s (controller-runtime's
		// delegating authorizer), hence the minute.
		Eventually(func(g Gomega) {
			code, body := scrape(scraper)
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring(`controller_runtime_reconcile_total{controller="llmendpoint"`))
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		code, body := scrape(stranger)
		Expect(code).To(Equal(http.StatusForbidden), body)
	})
})
