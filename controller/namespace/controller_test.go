package namespace

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	c       *client.Client
	hostURL string
)

func TestMain(m *testing.M) {
	srv, err := testserver.Start(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hostURL = srv.URL
	c, err = client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = srv.Stop()
	os.Exit(code)
}

// start runs the controller on cl; the returned stop (also run at cleanup) waits for every
// goroutine it started.
func start(t *testing.T, cl *client.Client) (stop func()) {
	t.Helper()
	cctx, err := controller.NewContext(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(cctx, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctrl.settle = 0
	ctrl.heldWait = 200 * time.Millisecond
	return testserver.RunControllers(t, cctx, ctrl)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, 20*time.Second, cond)
}

func condition(ns *corev1.Namespace, typ corev1.NamespaceConditionType) corev1.ConditionStatus {
	for _, c := range ns.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// TestDeletionEmptiesNamespace deletes a namespace holding objects of several groups, one of
// them held by a finalizer: the namespace stays, reporting the finalizer, until the finalizer
// is removed; then the contents and the namespace are gone. A namespace not being deleted is
// left alone.
func TestDeletionEmptiesNamespace(t *testing.T) {
	ctx := context.Background()
	start(t, c)
	ns := testserver.Namespace(t, c, "nsctl-")
	other := testserver.Namespace(t, c, "nsctl-other-")
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps")
	for _, n := range []string{ns, other} {
		if _, err := cms.Namespace(n).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cms.Namespace(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource[*corev1.Secret](c, "secrets").Namespace(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	if _, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}); err != nil {
		t.Fatal(err)
	}

	nss := client.Resource[*corev1.Namespace](c, "namespaces")
	if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the finalizer to be reported", func() bool {
		got, err := nss.Get(ctx, ns)
		return err == nil && condition(got, corev1.NamespaceFinalizersRemaining) == corev1.ConditionTrue &&
			condition(got, corev1.NamespaceContentRemaining) == corev1.ConditionTrue
	})
	// Everything but the held ConfigMap is gone already.
	for _, tc := range []struct {
		what string
		list func() (int, error)
	}{
		{"secrets", func() (int, error) {
			l, err := client.Resource[*corev1.Secret](c, "secrets").Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, err
			}
			return len(l.Items), nil
		}},
		{"pods", func() (int, error) {
			l, err := client.Resource[*corev1.Pod](c, "pods").Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, err
			}
			return len(l.Items), nil
		}},
		{"deployments", func() (int, error) {
			l, err := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, err
			}
			return len(l.Items), nil
		}},
	} {
		if n, err := tc.list(); err != nil || n != 0 {
			t.Errorf("%s: %d left (%v), want none", tc.what, n, err)
		}
	}
	left, err := cms.Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range left.Items {
		names = append(names, cm.Name)
	}
	if !slices.Equal(names, []string{"held"}) {
		t.Errorf("configmaps left %v, want [held]", names)
	}

	if _, err := cms.Namespace(ns).Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace to be removed", func() bool {
		_, err := nss.Get(ctx, ns)
		return client.IsNotFound(err)
	})
	if _, err := cms.Namespace(other).Get(ctx, "cm"); err != nil {
		t.Errorf("the other namespace lost its ConfigMap: %v", err)
	}
}

// TestStopEndsEveryGoroutine stops the controller while a namespace waits for a requeue.
// TestPodsGoFirst: while a pod of a deleted namespace remains (held by a finalizer here),
// nothing else in it is deleted; once it is gone, the rest goes.
func TestPodsGoFirst(t *testing.T) {
	ctx := context.Background()
	start(t, c)
	ns := testserver.Namespace(t, c, "nsctl-order-")
	if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "config"}}); err != nil {
		t.Fatal(err)
	}
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Finalizers: []string{"example.com/hold"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64(0)), Containers: []corev1.Container{{Name: "c", Image: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	nss := client.Resource[*corev1.Namespace](c, "namespaces")
	if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be marked", func() bool {
		p, err := pods.Get(ctx, "p")
		return err == nil && p.DeletionTimestamp != nil
	})
	time.Sleep(300 * time.Millisecond)
	if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Get(ctx, "config"); err != nil {
		t.Fatalf("the ConfigMap went before the pod: %v", err)
	}
	if _, err := pods.Patch(ctx, "p", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace to be removed", func() bool {
		_, err := nss.Get(ctx, ns)
		return client.IsNotFound(err)
	})
}

func TestStopEndsEveryGoroutine(t *testing.T) {
	ctx := context.Background()
	transport := &http.Transport{}
	cl, err := client.New(client.Config{Host: hostURL, QPS: -1, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	ns := testserver.Namespace(t, c, "nsctl-leak-")
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()

	stop := start(t, cl)
	nss := client.Resource[*corev1.Namespace](c, "namespaces")
	if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the finalizer to be reported", func() bool {
		got, err := nss.Get(ctx, ns)
		return err == nil && condition(got, corev1.NamespaceFinalizersRemaining) == corev1.ConditionTrue
	})
	stop()
	transport.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := cms.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
