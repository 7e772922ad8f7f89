package localcluster

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/warmroute/warmroute/test/process"
)

// TestDeploymentGetsLoopbackPods is the foundation's acceptance test: a
// Deployment of GPU pods runs on the fake nodes with distinct loopback IPs,
// follows a scale, and Stop leaves no process behind.
func TestDeploymentGetsLoopbackPods(t *testing.T) {
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	opts := Full()
	opts.BinDir = bin
	opts.PodCIDR = "127.9.0.1/16" // apart from other suites' clusters
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	if len(pids) != 5 {
		t.Errorf("started %d processes (%v), want 5: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok", len(pids), pids)
	}

	cs := kubernetes.NewForConfigOrDie(c.Config)
	dep := gpuDeployment("gpu-app", 3)
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ips := waitRunning(ctx, t, cs, 3)
	t.Logf("3 replicas running at %v", ips)

	if _, err := cs.AppsV1().Deployments("default").UpdateScale(ctx, "gpu-app", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "gpu-app", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ips = waitRunning(ctx, t, cs, 5)
	t.Logf("5 replicas running at %v", ips)

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, pid := range pids {
		if process.Alive(pid) {
			t.Errorf("pid %d still alive after Stop", pid)
		}
	}
}

func gpuDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "vllm",
					Image: "vllm/vllm-openai:v0.11.0",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						GPUResource: resource.MustParse("1"),
					}},
				}}},
			},
		},
	}
}

// waitRunning waits until exactly n pods run, each with its own 127.x IP.
func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, n int) []string {
	t.Helper()
	var last string
	for {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=gpu-app"})
		if err == nil {
			seen := map[string]bool{}
			var ips []string
			for _, p := range pods.Items {
				ip := net.ParseIP(p.Status.PodIP)
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && ip != nil && ip.IsLoopback() && !seen[p.Status.PodIP] {
					seen[p.Status.PodIP] = true
					ips = append(ips, p.Status.PodIP)
				}
			}
			if len(ips) == n && len(pods.Items) == n {
				return ips
			}
			last = strings.Join(ips, ",")
		}
		select {
		case <-ctx.Done():
			t.Fatalf("want %d running pods with distinct loopback IPs; last saw [%s]", n, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
