package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
	"github.com/warmroute/warmroute/hack/manifests"
	"github.com/warmroute/warmroute/test/localcluster"
)

// The harness installs warmroute as `make deploy` does (config/default,
// then config/admission) and runs the operator as a process in the place
// of the Deployment, with the Deployment's identity: a token of its
// ServiceAccount, so that every call the operator makes is authorized by
// the RBAC of config/rbac and nothing else, and a verb missing there fails
// the specs that need it. What cert-manager does in a cluster the harness
// does itself: it issues every Certificate from a CA of its own and writes
// that CA where the objects ask for it (cert-manager.io/inject-ca-from).
// The Services the API server calls (the admission webhooks and the custom
// metrics API) get an EndpointSlice pointing at the operator's loopback
// ports, as the endpointslice controller would for the manager's pod.

// Where config/default mounts the two serving certificates; the operator
// reads them there by default (--webhook-cert-dir, --custom-metrics-cert-dir).
const (
	webhookCertMount       = "/tmp/k8s-webhook-server/serving-certs"
	customMetricsCertMount = "/apiserver.local.config/certificates"
)

// The manager container's named ports that the API server reaches through
// a Service.
const (
	webhookPortName       = "webhook-server"
	customMetricsPortName = "custom-metrics"
	metricsPortName       = "metrics"
)

const (
	InjectCAFrom = "cert-manager.io/inject-ca-from"
	// installOwner is the field manager of what the harness applies.
	installOwner = "warmroute-harness"
	// operatorTokenLifetime outlasts any run of the suites (the e2e
	// suite's timeout is 40 minutes); the operator does not renew it.
	operatorTokenLifetime = 24 * time.Hour
)

// installation is config/default and config/admission, ready to apply.
type installation struct {
	// objects are applied in order (kustomize's: Namespace first, webhook
	// configurations last).
	objects []*unstructured.Unstructured
	// apiServices are applied once the operator serves them: until then
	// the API server's discovery reports their group unavailable to every
	// client, the operator's own included.
	apiServices []*unstructured.Unstructured
	// namespace and serviceAccount are the manager Deployment's.
	namespace, serviceAccount string
	// certDirs are the local directories holding what the manager
	// container mounts at webhookCertMount and customMetricsCertMount.
	certDirs map[string]string
	// ports are the local ports of the manager's named container ports.
	ports map[string]int
}

// renderInstall builds config/default and config/admission (with the
// kustomize API bin/kustomize is built from), issues the certificates
// into dir and picks the operator's ports. The custom metrics API's
// APIService is left out unless customMetrics: nothing would serve it.
func renderInstall(repoRoot, dir string, customMetrics bool) (*installation, error) {
	objs, err := Kustomize(repoRoot, "default", "admission")
	if err != nil {
		return nil, err
	}
	in := &installation{certDirs: map[string]string{}, ports: map[string]int{}}
	var deployment *appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			if deployment != nil {
				return nil, errors.New("config/default has more than one Deployment")
			}
			deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, deployment); err != nil {
				return nil, fmt.Errorf("Deployment %s: %w", o.GetName(), err)
			}
		}
	}
	if deployment == nil {
		return nil, errors.New("config/default has no Deployment")
	}
	in.namespace, in.serviceAccount = deployment.Namespace, deployment.Spec.Template.Spec.ServiceAccountName
	if in.serviceAccount == "" {
		return nil, fmt.Errorf("Deployment %s names no serviceAccountName: the operator would run as the namespace's default", deployment.Name)
	}
	if err := in.pickPorts(deployment); err != nil {
		return nil, err
	}

	ca, err := localcluster.NewCA("warmroute-harness-ca")
	if err != nil {
		return nil, err
	}
	// Certificates by namespace/name, as inject-ca-from names them.
	issued := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() != "Certificate" {
			continue
		}
		secret, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
		names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
		if secret == "" || len(names) == 0 {
			return nil, fmt.Errorf("Certificate %s: no secretName or dnsNames", o.GetName())
		}
		cert, key, err := ca.Issue(names[0], names, []net.IP{net.ParseIP("127.0.0.1")})
		if err != nil {
			return nil, err
		}
		d := filepath.Join(dir, secret)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM} {
			if err := os.WriteFile(filepath.Join(d, name), b, 0o600); err != nil {
				return nil, err
			}
		}
		issued[o.GetNamespace()+"/"+o.GetName()] = true
	}
	if err := in.mountCerts(deployment, dir); err != nil {
		return nil, err
	}

	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "Certificate", "Issuer":
			// The operator runs as a process; the harness issued the
			// certificates.
			continue
		case "CustomResourceDefinition":
			// Installed with the cluster, from config/crd/bases, which
			// config/default includes.
			continue
		case "APIService":
			if !customMetrics {
				continue
			}
		}
		if from, ok := o.GetAnnotations()[InjectCAFrom]; ok {
			if !issued[from] {
				return nil, fmt.Errorf("%s %s: %s names %q, which is no Certificate of config/default", o.GetKind(), o.GetName(), InjectCAFrom, from)
			}
			if err := InjectCA(o, ca.PEM); err != nil {
				return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		if o.GetKind() == "APIService" {
			in.apiServices = append(in.apiServices, o)
		} else {
			in.objects = append(in.objects, o)
		}
	}
	return in, nil
}

// Kustomize builds the kustomizations config/<dir> of each dir, with the
// kustomize API bin/kustomize is built from, in bin/kustomize's order:
// Namespaces first, webhook configurations last.
func Kustomize(repoRoot string, dirs ...string) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	var objs []*unstructured.Unstructured
	for _, d := range dirs {
		res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, "config", d))
		if err != nil {
			return nil, fmt.Errorf("kustomize build config/%s: %w", d, err)
		}
		y, err := res.AsYaml()
		if err != nil {
			return nil, err
		}
		o, err := manifests.DecodeAll(bytes.NewReader(y))
		if err != nil {
			return nil, fmt.Errorf("config/%s: %w", d, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// pickPorts gives each named port of the manager container that a
// Service targets a free loopback port.
func (in *installation) pickPorts(d *appsv1.Deployment) error {
	c := managerContainer(d)
	if c == nil {
		return fmt.Errorf("Deployment %s has no container %q", d.Name, "manager")
	}
	for _, name := range []string{webhookPortName, customMetricsPortName, metricsPortName} {
		found := false
		for _, p := range c.Ports {
			found = found || p.Name == name
		}
		if !found {
			return fmt.Errorf("container manager of Deployment %s has no port %q", d.Name, name)
		}
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		_, p, _ := net.SplitHostPort(addr)
		in.ports[name], _ = strconv.Atoi(p)
	}
	return nil
}

// mountCerts finds which issued Secret the manager container mounts where
// the operator reads each certificate.
func (in *installation) mountCerts(d *appsv1.Deployment, dir string) error {
	secrets := map[string]string{} // by volume name
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	for _, m := range managerContainer(d).VolumeMounts {
		if secret, ok := secrets[m.Name]; ok {
			in.certDirs[m.MountPath] = filepath.Join(dir, secret)
		}
	}
	for _, mount := range []string{webhookCertMount, customMetricsCertMount} {
		d, ok := in.certDirs[mount]
		if !ok {
			return fmt.Errorf("the manager container mounts no Secret at %s, where the operator reads its certificate", mount)
		}
		if _, err := os.Stat(filepath.Join(d, "tls.crt")); err != nil {
			return fmt.Errorf("the Secret mounted at %s is issued by no Certificate: %w", mount, err)
		}
	}
	return nil
}

func managerContainer(d *appsv1.Deployment) *corev1.Container {
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// InjectCA does cert-manager's CA injection: the caBundle of every webhook
// of a webhook configuration, or an APIService's.
func InjectCA(o *unstructured.Unstructured, caPEM []byte) error {
	ca := base64.StdEncoding.EncodeToString(caPEM)
	a := o.GetAnnotations()
	delete(a, InjectCAFrom)
	o.SetAnnotations(a)
	switch o.GetKind() {
	case "APIService":
		return unstructured.SetNestedField(o.Object, ca, "spec", "caBundle")
	case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			m, _ := h.(map[string]any)
			if err := unstructured.SetNestedField(m, ca, "clientConfig", "caBundle"); err != nil {
				return err
			}
		}
		return unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
	}
	return fmt.Errorf("no CA injection for kind %s", o.GetKind())
}

// apply applies objects of the installation with the administrator's
// client, as `kubectl apply --server-side` does, and points each Service
// that targets one of the operator's ports at it.
func (in *installation) apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(installOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() != "Service" {
			continue
		}
		ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		for _, p := range ports {
			m, _ := p.(map[string]any)
			target, _ := m["targetPort"].(string)
			local, ok := in.ports[target]
			if !ok {
				continue
			}
			name, _ := m["name"].(string)
			if err := c.Create(ctx, loopbackSlice(o.GetNamespace(), o.GetName(), name, local)); err != nil {
				return fmt.Errorf("EndpointSlice of Service %s: %w", o.GetName(), err)
			}
		}
	}
	return nil
}

// loopbackSlice is an EndpointSlice of a Service, for the Service port
// portName, that sends the API server to a process on this machine. Its
// address type is FQDN: the API server refuses loopback addresses in IPv4
// slices (see MirrorEndpointSlices); the aggregator and the webhook
// client read the address whatever the type.
func loopbackSlice(namespace, service, portName string, port int) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: service + "-harness", Namespace: namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: sliceManager},
		},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// operatorKubeconfig writes a kubeconfig that authenticates as the
// operator's ServiceAccount, with a token from the TokenRequest API (what
// the kubelet projects into the manager's pod), and returns its path.
func (in *installation) operatorKubeconfig(ctx context.Context, e *Env) (string, error) {
	tr, err := e.Kube.CoreV1().ServiceAccounts(in.namespace).CreateToken(ctx, in.serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(operatorTokenLifetime / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", in.namespace, in.serviceAccount, err)
	}
	cfg := e.Cluster.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["operator"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "operator", Namespace: in.namespace}
	kc.CurrentContext = "operator"
	path := filepath.Join(e.Cluster.WorkDir, "operator.kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// operatorArgs are the flags the operator process needs besides the
// Deployment's: where it listens here, its certificates and the namespace
// of its leader election Lease (in a pod, its own).
func (in *installation) operatorArgs(kubeconfig, probe string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		// HTTPS, authorized through the API server (metrics-auth-role).
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(in.ports[metricsPortName]),
		"--health-probe-bind-address=" + probe,
		"--leader-elect=true",
		"--leader-election-namespace=" + in.namespace,
		// The Deployment's POD_NAMESPACE: the endpoints' NetworkPolicies
		// admit the operator's pods there.
		"--operator-namespace=" + in.namespace,
		"--enable-webhooks=true",
		"--webhook-bind-address=127.0.0.1:" + strconv.Itoa(in.ports[webhookPortName]),
		"--webhook-cert-dir=" + in.certDirs[webhookCertMount],
	}
}

// waitWebhooks waits until the API server gets answers from both admission
// webhooks: a server-side dry run of a create passes them without storing
// anything, and comes back defaulted by the mutating one (the derived
// defaults are the webhook's alone; the CRD's schema has none for them).
func waitWebhooks(ctx context.Context, c client.Client, namespace string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		ep := &servingv1alpha1.LLMEndpoint{
			ObjectMeta: metav1.ObjectMeta{Name: "harness-webhook-probe", Namespace: namespace},
			Spec:       servingv1alpha1.LLMEndpointSpec{Model: servingv1alpha1.ModelSpec{Name: "probe", URI: "hf://harness/probe"}},
		}
		if last = c.Create(ctx, ep, client.DryRunAll); last != nil {
			return false, nil
		}
		if ep.Spec.Router.Replicas == nil {
			return false, errors.New("the dry run passed but came back without spec.router.replicas: the mutating webhook was not called")
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("admission webhooks not answering within 60s (last: %w): %w", last, err)
	}
	if err != nil {
		return fmt.Errorf("admission webhooks not answering within 60s: %w", err)
	}
	return nil
}

// OperatorDenials returns the lines of the operator's log, since the last
// call, in which the API server refused the operator a request for want of
// a permission: each names a verb config/rbac lacks. Specs may pass around
// some of them (a failed Event, a retried write), so a suite checks this
// after each spec.
func (e *Env) OperatorDenials() ([]string, error) {
	f, err := os.Open(filepath.Join(e.LogDir(), "operator.log"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	if _, err := f.Seek(e.deniedFrom, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	// Only whole lines; a partial last one is read next time.
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	e.deniedFrom += int64(len(b))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// The API server's Forbidden message: `… is forbidden: User "<user>"
		// cannot <verb> resource …` (quoted once more inside the JSON log).
		if strings.Contains(line, "forbidden") && strings.Contains(line, e.operatorUser) {
			out = append(out, line)
		}
	}
	return out, nil
}
