package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// MirrorConfigMap projects a ConfigMap into dir on every change, the way
// kubelet does for a ConfigMap volume (projectVolume), for the routers the
// harness runs as processes on KWOK nodes. test/node runs router pods
// against a real kubelet's volume.
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
			AddFunc:    func(obj any) { _ = projectVolume(dir, data(obj)) },
			UpdateFunc: func(_, obj any) { _ = projectVolume(dir, data(obj)) },
		},
	})
	go ctrl.Run(ctx.Done())
	return nil
}

// projectVolume writes one version of data into dir the way the kubelet
// projects a ConfigMap or Secret volume (without subPath): each version in
// its own timestamped directory, a `..data` symlink swapped atomically to
// the newest by renaming `..data_tmp` over it, one symlink per key
// pointing through `..data`, and the previous version removed after the
// swap.
func projectVolume(dir string, data map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create volume directory: %w", err)
	}
	version := filepath.Join(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.000000000"))
	if err := os.Mkdir(version, 0o755); err != nil {
		return fmt.Errorf("create version directory: %w", err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(version, k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("write key %s: %w", k, err)
		}
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(version), tmpLink); err != nil {
		return fmt.Errorf("link ..data_tmp: %w", err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
		return fmt.Errorf("swap ..data: %w", err)
	}
	for k := range data {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return fmt.Errorf("link key %s: %w", k, err)
			}
		}
	}
	if old != "" {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
