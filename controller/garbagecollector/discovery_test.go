package garbagecollector

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestWatchesEveryDeletableResource: the collector watches exactly the resources discovery
// lists as listable, watchable and deletable, events left out.
func TestWatchesEveryDeletableResource(t *testing.T) {
	ctrl := start(t)
	lists, err := c.ServerResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []schema.GroupVersionResource
	for _, r := range client.FilterResources(lists, "list", "watch", "delete") {
		if r.Resource != "events" {
			want = append(want, r.GroupVersionResource)
		}
	}
	slices.SortFunc(want, compareGVR)
	waitFor(t, "the collector to watch what discovery lists", func() bool { return slices.Equal(ctrl.watchedResources(), want) })
	for _, must := range []string{"limitranges", "resourcequotas", "pods", "namespaces", "horizontalpodautoscalers"} {
		if !slices.ContainsFunc(want, func(g schema.GroupVersionResource) bool { return g.Resource == must }) {
			t.Errorf("%s not watched", must)
		}
	}
}

// TestCollectsDiscoveredResource: objects of a resource the old fixed list of kinds did not
// have (LimitRanges) are collected once their owner is gone, and the owner may be of such a
// kind too (a ResourceQuota).
func TestCollectsDiscoveredResource(t *testing.T) {
	start(t)
	ns := testserver.Namespace(t, c, "gc-disc")
	ctx := context.Background()
	quota, err := client.Resource[*corev1.ResourceQuota](c, "resourcequotas").Namespace(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "owner"}})
	if err != nil {
		t.Fatal(err)
	}
	limitRange(t, ns, "dep", owner("v1", "ResourceQuota", "owner", quota, false))
	if err := client.Resource[*corev1.ResourceQuota](c, "resourcequotas").Namespace(ns).Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the LimitRange to be collected", gone[*corev1.LimitRange](t, "limitranges", ns, "dep"))
}

func limitRange(t *testing.T, ns, name string, owners ...metav1.OwnerReference) {
	t.Helper()
	_, err := client.Resource[*corev1.LimitRange](c, "limitranges").Namespace(ns).Create(context.Background(), &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestResourceAppearsAtRediscovery: a resource discovery did not list when the collector
// started (as a custom resource defined later) is watched from the next discovery on, without
// a restart, and its objects are collected.
func TestResourceAppearsAtRediscovery(t *testing.T) {
	var served atomic.Bool
	limitRanges := schema.GroupVersionResource{Version: "v1", Resource: "limitranges"}
	ctrl := startWith(t, func(gvr schema.GroupVersionResource) bool { return gvr == limitRanges && !served.Load() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testserver.Namespace(t, c, "gc-appear")
	waitFor(t, "the collector to start watching", func() bool { return len(ctrl.watchedResources()) > 0 })
	if slices.Contains(ctrl.watchedResources(), limitRanges) {
		t.Fatal("limitranges watched while discovery hides them")
	}
	cm, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}})
	if err != nil {
		t.Fatal(err)
	}
	limitRange(t, ns, "dep", owner("v1", "ConfigMap", "owner", cm, false))
	if err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to be gone", gone[*corev1.ConfigMap](t, "configmaps", ns, "owner"))

	served.Store(true)
	ctrl.rediscover(ctx) // what the periodic pass does
	if !slices.Contains(ctrl.watchedResources(), limitRanges) {
		t.Fatal("limitranges not watched after discovery lists them")
	}
	waitFor(t, "the LimitRange to be collected", gone[*corev1.LimitRange](t, "limitranges", ns, "dep"))

	served.Store(false)
	ctrl.rediscover(ctx)
	if slices.Contains(ctrl.watchedResources(), limitRanges) {
		t.Error("limitranges still watched after discovery stopped listing them")
	}
}

// TestCollectsCustomResource: a CRD defined while the collector runs is watched from its next
// discovery on, without a restart; a custom object whose owner is gone is collected, and a
// custom object owning a ConfigMap takes it along when it is deleted.
func TestCollectsCustomResource(t *testing.T) {
	ctrl := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitFor(t, "the collector to start watching", func() bool { return len(ctrl.watchedResources()) > 0 })
	gvr := testserver.CustomResource(t, c, "gc.example.com", "widgets", "Widget")
	ctrl.rediscover(ctx) // what the periodic pass does
	if !slices.Contains(ctrl.watchedResources(), gvr) {
		t.Fatalf("%s not watched after discovery lists it", gvr)
	}
	ns := testserver.Namespace(t, c, "gc-crd")
	cm, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}})
	if err != nil {
		t.Fatal(err)
	}
	testserver.CreateCustomObject(t, c, gvr, "Widget", ns, map[string]any{"metadata": map[string]any{"name": "dep",
		"ownerReferences": []metav1.OwnerReference{owner("v1", "ConfigMap", "owner", cm, false)}}})
	w := testserver.CreateCustomObject(t, c, gvr, "Widget", ns, map[string]any{"metadata": map[string]any{"name": "owner"}})
	configMap(t, ns, "owned", nil, owner(gvr.GroupVersion().String(), "Widget", "owner", w, false))

	widgets := client.Metadata(c, gvr).Namespace(ns)
	if err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Widget to be collected", func() bool {
		_, err := widgets.Get(ctx, "dep")
		return client.IsNotFound(err)
	})
	if err := widgets.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Widget's ConfigMap to be collected", gone[*corev1.ConfigMap](t, "configmaps", ns, "owned"))
}
