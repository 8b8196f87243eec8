package resourcequota

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestCountsEveryDiscoveredResource: the controller counts exactly the namespaced resources
// discovery lists as creatable, listable, watchable and deletable, events left out.
func TestCountsEveryDiscoveredResource(t *testing.T) {
	ctrl := start(t, 0)
	lists, err := c.ServerResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []schema.GroupResource
	for _, r := range client.FilterResources(lists, "create", "list", "watch", "delete") {
		if r.Namespaced && r.Resource != "events" {
			want = append(want, r.GroupResource())
		}
	}
	slices.SortFunc(want, func(a, b schema.GroupResource) int { return strings.Compare(a.String(), b.String()) })
	testserver.Eventually(t, "the controller to count what discovery lists", 15*time.Second,
		func() bool { return slices.Equal(ctrl.countedResources(), want) })
	for _, must := range []string{"limitranges", "poddisruptionbudgets", "horizontalpodautoscalers.autoscaling", "pods"} {
		if !slices.ContainsFunc(want, func(gr schema.GroupResource) bool { return gr.String() == must || gr.Resource == must }) {
			t.Errorf("%s not counted", must)
		}
	}
}

// TestCountsResourceThatAppears: a resource discovery did not list when the controller
// started (as a custom resource defined later) is counted from the next discovery on,
// without a restart, objects that existed before included; one that goes away is no longer.
func TestCountsResourceThatAppears(t *testing.T) {
	var served atomic.Bool
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ctrl := startWith(t, 0, func(gvr schema.GroupVersionResource) bool { return gvr == configMaps && !served.Load() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testserver.Namespace(t, c, "appears-")
	for _, name := range []string{"x", "y"} {
		if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	createQuota(t, ns, "q", []string{"count/configmaps=5", "count/secrets=5"})
	// Not counted while discovery does not list them: no usage for them at all.
	waitUsed(t, ns, "q", "count/secrets=0")

	served.Store(true)
	ctrl.rediscover(ctx) // what the periodic pass does
	waitUsed(t, ns, "q", "count/configmaps=2", "count/secrets=0")

	served.Store(false)
	ctrl.rediscover(ctx)
	if slices.Contains(ctrl.countedResources(), configMaps.GroupResource()) {
		t.Error("configmaps still counted after discovery stopped listing them")
	}
}

// TestCountsCustomResource: a CRD defined while the controller runs is counted
// (count/<resource>.<group>) from its next discovery on, without a restart: every quota that
// names it is recounted then, those that have counted everything else already and those in
// namespaces with none of its objects (0 used, which admission needs to charge against).
func TestCountsCustomResource(t *testing.T) {
	// Discovery hides the resource until the test says, so that the quotas are counted
	// without it first, whenever the controller's own first discovery runs.
	widgets := schema.GroupVersionResource{Group: "quota.example.com", Version: "v1", Resource: "widgets"}
	var served atomic.Bool
	ctrl := startWith(t, 0, func(gvr schema.GroupVersionResource) bool { return gvr == widgets && !served.Load() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if gvr := testserver.CustomResource(t, c, widgets.Group, widgets.Resource, "Widget"); gvr != widgets {
		t.Fatalf("custom resource %s, want %s", gvr, widgets)
	}
	ns := testserver.Namespace(t, c, "quota-crd-")
	for _, name := range []string{"a", "b"} {
		testserver.CreateCustomObject(t, c, widgets, "Widget", ns, map[string]any{"metadata": map[string]any{"name": name}})
	}
	empty := testserver.Namespace(t, c, "quota-crd-empty-")
	for _, n := range []string{ns, empty} {
		createQuota(t, n, "q", []string{"count/widgets.quota.example.com=5", "count/secrets=5"})
		waitUsed(t, n, "q", "count/secrets=0")
	}

	served.Store(true)
	ctrl.rediscover(ctx) // what the periodic pass does
	waitUsed(t, ns, "q", "count/widgets.quota.example.com=2", "count/secrets=0")
	waitUsed(t, empty, "q", "count/widgets.quota.example.com=0", "count/secrets=0")
	if err := client.Metadata(c, widgets).Namespace(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ns, "q", "count/widgets.quota.example.com=1", "count/secrets=0")
}
