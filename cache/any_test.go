package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestForResource: a resource with a typed informer is served by it; any other gets an
// informer of its objects' metadata, shared by every caller.
func TestForResource(t *testing.T) {
	c := newClient(t, apiserverURL(t))
	ns := testNamespace(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.Resource[*corev1.Secret](c, "secrets").Namespace(ns).Create(ctx,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1", Labels: map[string]string{"a": "b"}}}); err != nil {
		t.Fatal(err)
	}
	f := cache.NewFactory(c, ns)
	typed := cache.For[*corev1.ConfigMap](f, "configmaps")
	if got := f.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); got != cache.AnyInformer(typed) {
		t.Errorf("configmaps: got %T, want the typed informer", got)
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	meta := f.ForResource(secrets)
	if f.ForResource(secrets) != meta {
		t.Error("a second ForResource made another informer")
	}
	added := make(chan cache.Object, 10)
	reg := meta.AddObjectHandler(cache.Handler[cache.Object]{OnAdd: func(o cache.Object, _ bool) { added <- o }}, 0)
	f.Start(ctx)
	defer f.Shutdown()
	defer cancel()
	if !cache.WaitForCacheSync(ctx, reg.HasSynced, typed.HasSynced) {
		t.Fatal("not synced")
	}
	o := <-added
	if _, ok := o.(*metav1.PartialObjectMetadata); !ok || o.GetName() != "s1" || o.GetLabels()["a"] != "b" {
		t.Fatalf("added %T %s %v", o, o.GetName(), o.GetLabels())
	}
	if objs := meta.Objects(ns); len(objs) != 1 || objs[0].GetName() != "s1" {
		t.Errorf("Objects(%s): %v", ns, objs)
	}
	if objs := meta.Objects("elsewhere"); len(objs) != 0 {
		t.Errorf("Objects(elsewhere): %v", objs)
	}
}
