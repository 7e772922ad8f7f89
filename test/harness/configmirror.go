package harness

import (
	"context"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/warmroute/warmroute/test/kubeletvolume"
)

// MirrorConfigMap projects a ConfigMap into dir on every change, the way
// kubelet does for a ConfigMap volume (see test/kubeletvolume), so that the
// router's file watcher is tested against what it meets in a pod.
func MirrorConfigMap(ctx context.Context, client kubernetes.Interface, namespace, name, dir string) error {
	return mirror(ctx, client, "configmaps", &corev1.ConfigMap{}, namespace, name, dir,
		func(obj any) map[string]string { return obj.(*corev1.ConfigMap).Data })
}

// MirrorSecret projects a Secret into dir the same way, as kubelet does
// for a Secret volume (the router's cache salt key and API keys).
func MirrorSecret(ctx context.Context, client kubernetes.Interface, namespace, name, dir string) error {
	return mirror(ctx, client, "secrets", &corev1.Secret{}, namespace, name, dir, func(obj any) map[string]string {
		data := map[string]string{}
		for k, v := range obj.(*corev1.Secret).Data {
			data[k] = string(v)
		}
		return data
	})
}

func mirror(ctx context.Context, client kubernetes.Interface, resource string, objType runtime.Object, namespace, name, dir string, data func(any) map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), resource, namespace,
		fields.OneTermEqualSelector("metadata.name", name))
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    objType,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { _ = kubeletvolume.Write(dir, data(obj)) },
			UpdateFunc: func(_, obj any) { _ = kubeletvolume.Write(dir, data(obj)) },
		},
	})
	go ctrl.Run(ctx.Done())
	return nil
}
