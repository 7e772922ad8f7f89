package harness

import (
	"context"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/warmroute/warmroute/test/kubeletvolume"
)

// MirrorConfigMap projects a ConfigMap into dir on every change, the way
// kubelet does for a ConfigMap volume (see test/kubeletvolume), so that the
// router's file watcher is tested against what it meets in a pod.
func MirrorConfigMap(ctx context.Context, client kubernetes.Interface, namespace, name, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", namespace,
		fields.OneTermEqualSelector("metadata.name", name))
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { _ = kubeletvolume.Write(dir, obj.(*corev1.ConfigMap).Data) },
			UpdateFunc: func(_, obj any) { _ = kubeletvolume.Write(dir, obj.(*corev1.ConfigMap).Data) },
		},
	})
	go ctrl.Run(ctx.Done())
	return nil
}
