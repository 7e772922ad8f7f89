package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/warmroute/warmroute/test/localcluster"
)

// The custom metrics API's Service, as config/metricsapi declares one;
// here it has no selector: its EndpointSlice points at the operator
// process on this machine.
const (
	customMetricsNamespace = "warmroute-system"
	customMetricsService   = "custom-metrics-service"
	customMetricsAPI       = "v1beta2.custom.metrics.k8s.io"
)

// customMetricsServing is how the operator serves the custom metrics API
// in the harness: on a port of its own, with a certificate for its
// Service's DNS name from a CA the APIService names.
type customMetricsServing struct {
	port    int
	certDir string
	ca      []byte
}

// prepareCustomMetrics issues the serving certificate into dir, where the
// operator reads it (--custom-metrics-cert-dir) under the names OLM and
// config/default mount it with.
func prepareCustomMetrics(dir string) (*customMetricsServing, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	ca, err := localcluster.NewCA("custom-metrics-ca")
	if err != nil {
		return nil, err
	}
	dns := customMetricsService + "." + customMetricsNamespace + ".svc"
	cert, key, err := ca.Issue(dns, []string{dns}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"apiserver.crt": cert, "apiserver.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return &customMetricsServing{port: port, certDir: dir, ca: ca.PEM}, nil
}

func (s *customMetricsServing) operatorArgs() []string {
	return []string{
		"--custom-metrics-port=" + strconv.Itoa(s.port),
		"--custom-metrics-cert-dir=" + s.certDir,
		// The HPA controller syncs every 2 s here (localcluster).
		"--custom-metrics-scrape-interval=1s",
		"--load-status-period=5s",
	}
}

// register puts the operator's custom metrics API behind the API server,
// as config/metricsapi does in a cluster, and waits until the API server
// reports it Available.
func (s *customMetricsServing) register(ctx context.Context, e *Env) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: customMetricsNamespace}}
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns.Name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: customMetricsService, Namespace: customMetricsNamespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "https", Port: 443, TargetPort: intstr.FromInt(s.port), Protocol: corev1.ProtocolTCP,
		}}},
	}
	if _, err := e.Kube.CoreV1().Services(customMetricsNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Service %s: %w", svc.Name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: customMetricsService, Namespace: customMetricsNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: customMetricsService, discoveryv1.LabelManagedBy: sliceManager},
		},
		// FQDN: the API server refuses loopback addresses in IPv4 slices
		// (see MirrorEndpointSlices); the aggregator reads the address
		// whatever the type.
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(s.port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := e.Kube.DiscoveryV1().EndpointSlices(customMetricsNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create EndpointSlice %s: %w", slice.Name, err)
	}
	agg, err := aggregator.NewForConfig(e.Cluster.Config)
	if err != nil {
		return err
	}
	api := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: customMetricsAPI},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "custom.metrics.k8s.io", Version: "v1beta2",
			Service:              &apiregistrationv1.ServiceReference{Namespace: customMetricsNamespace, Name: customMetricsService, Port: ptr.To(int32(443))},
			CABundle:             s.ca,
			GroupPriorityMinimum: 100,
			VersionPriority:      200,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, api, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create APIService %s: %w", api.Name, err)
	}
	var last []apiregistrationv1.APIServiceCondition
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, customMetricsAPI, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got.Status.Conditions
		for _, c := range last {
			if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("APIService %s not Available within 60s: %+v (operator log: %s): %w", customMetricsAPI, last,
			filepath.Join(e.Cluster.WorkDir, "operator.log"), err)
	}
	return nil
}
