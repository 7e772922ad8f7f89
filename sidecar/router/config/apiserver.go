package config

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	routingv1alpha1 "github.com/warmroute/warmroute/api/routing/v1alpha1"
)

// ParseConfigMapRef splits "namespace/name".
func ParseConfigMapRef(ref string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("configmap %q: want namespace/name", ref)
	}
	return ns, n, nil
}

// WatchConfigMap offers the routing document of one ConfigMap to the loader
// on every change seen through the API (a watch on that one object, so the
// router needs only get/list/watch on it), until ctx ends.
func WatchConfigMap(ctx context.Context, client kubernetes.Interface, namespace, name string, l *Loader) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	offer := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != name {
			return
		}
		data, ok := cm.Data[routingv1alpha1.ConfigMapKey]
		if !ok {
			l.Log.Info("routing ConfigMap has no document key", "configmap", namespace+"/"+name, "key", routingv1alpha1.ConfigMapKey)
			return
		}
		_, _ = l.Offer(SourceAPI, []byte(data))
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    offer,
		UpdateFunc: func(_, obj any) { offer(obj) },
	}); err != nil {
		return fmt.Errorf("watch routing ConfigMap %s/%s: %w", namespace, name, err)
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}
