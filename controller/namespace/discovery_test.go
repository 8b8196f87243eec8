package namespace

import (
	"context"
	"testing"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEveryDiscoveredResourceEmptied: a deleted namespace loses its objects of every
// namespaced resource discovery lists, whichever they are, custom ones included: once the namespace is gone,
// listing each such resource there (as metadata) finds nothing.
func TestEveryDiscoveredResourceEmptied(t *testing.T) {
	ctx := context.Background()
	start(t, c)
	widgets := testserver.CustomResource(t, c, "ns.example.com", "widgets", "Widget")
	ns := testserver.Namespace(t, c, "nsctl-all-")
	testserver.CreateCustomObject(t, c, widgets, "Widget", ns, map[string]any{"metadata": map[string]any{"name": "w"}})
	create := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := client.Resource[*corev1.LimitRange](c, "limitranges").Namespace(ns).Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "l"}})
	create(err)
	_, err = client.Resource[*corev1.ResourceQuota](c, "resourcequotas").Namespace(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}})
	create(err)
	_, err = client.Resource[*coordinationv1.Lease](c, "leases").Namespace(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}})
	create(err)
	_, err = client.Resource[*policyv1.PodDisruptionBudget](c, "poddisruptionbudgets").Namespace(ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	create(err)
	_, err = client.Resource[*corev1.ServiceAccount](c, "serviceaccounts").Namespace(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}})
	create(err)

	nss := client.Resource[*corev1.Namespace](c, "namespaces")
	if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace to be removed", func() bool {
		_, err := nss.Get(ctx, ns)
		return client.IsNotFound(err)
	})
	lists, err := c.ServerResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checked, sawCustom := 0, false
	for _, r := range client.FilterResources(lists, "list") {
		if !r.Namespaced {
			continue
		}
		sawCustom = sawCustom || r.GroupVersionResource == widgets
		left, err := client.Metadata(c, r.GroupVersionResource).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("%s: %v", r.GroupVersionResource, err)
			continue
		}
		checked++
		for _, o := range left.Items {
			t.Errorf("%s %s left in the deleted namespace", r.GroupVersionResource, o.Name)
		}
	}
	if checked < 10 || !sawCustom {
		t.Errorf("%d namespaced resources checked, the custom one among them: %v", checked, sawCustom)
	}
}
