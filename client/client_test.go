package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

var (
	server     *testserver.Server
	kubeconfig = filepath.Join(os.TempDir(), fmt.Sprintf("kplane-client-test-%d.kubeconfig", os.Getpid()))
)

func TestMain(m *testing.M) {
	var err error
	if server, err = testserver.Start(func(o *apiserver.Options) { o.WriteKubeconfig = kubeconfig }); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = server.Stop()
	os.Remove(kubeconfig)
	os.Exit(code)
}

func newClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.FromKubeconfig(kubeconfig, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testNamespace(t *testing.T, c *client.Client) string {
	return testserver.Namespace(t, c, "client-test-")
}

func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
}

func TestCRUD(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)

	created, err := pods.Create(ctx, pod("a", map[string]string{"app": "web"}))
	if err != nil || created.UID == "" || created.Namespace != ns {
		t.Fatalf("create: %v %+v", err, created)
	}
	if _, err := pods.Create(ctx, pod("a", nil)); !client.IsAlreadyExists(err) {
		t.Fatalf("duplicate create: %v", err)
	}
	got, err := pods.Get(ctx, "a")
	if err != nil || got.ResourceVersion != created.ResourceVersion {
		t.Fatalf("get: %v", err)
	}
	got.Labels["tier"] = "front"
	updated, err := pods.Update(ctx, got)
	if err != nil || updated.Labels["tier"] != "front" {
		t.Fatalf("update: %v", err)
	}
	if _, err := pods.Update(ctx, got); !client.IsConflict(err) {
		t.Fatalf("stale update: %v", err)
	}
	updated.Status.Phase = corev1.PodRunning
	if st, err := pods.UpdateStatus(ctx, updated); err != nil || st.Status.Phase != corev1.PodRunning {
		t.Fatalf("update status: %v", err)
	}
	for _, p := range []struct {
		pt   types.PatchType
		data string
	}{
		{types.StrategicMergePatchType, `{"metadata":{"labels":{"s":"1"}}}`},
		{types.MergePatchType, `{"metadata":{"labels":{"m":"1"}}}`},
		{types.JSONPatchType, `[{"op":"add","path":"/metadata/labels/j","value":"1"}]`},
	} {
		if _, err := pods.Patch(ctx, "a", p.pt, []byte(p.data), metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s patch: %v", p.pt, err)
		}
	}
	got, _ = pods.Get(ctx, "a")
	if got.Labels["s"] != "1" || got.Labels["m"] != "1" || got.Labels["j"] != "1" {
		t.Fatalf("patches: %v", got.Labels)
	}
	_, err = pods.Create(ctx, pod("Bad_Name", nil))
	if !client.IsInvalid(err) || len(client.Causes(err)) == 0 || client.Causes(err)[0].Field != "metadata.name" {
		t.Fatalf("invalid create: %v %v", err, client.Causes(err))
	}
	wrongUID := types.UID("nope")
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrongUID}}); !client.IsConflict(err) {
		t.Fatalf("delete with failing precondition: %v", err)
	}
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "a"); !client.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}

	// Cluster-scoped and grouped resources.
	nodes := client.Resource[*corev1.Node](c, "nodes")
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-" + ns}}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx, "n-"+ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deploys := client.Resource[*appsv1.Deployment](c, "deployments").Namespace(ns)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}}, Spec: pod("", nil).Spec},
	}}
	if got, err := deploys.Create(ctx, d); err != nil || *got.Spec.Replicas != 1 {
		t.Fatalf("deployment: %v", err)
	}
}

func TestListSelectorsAndPaging(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for i := 0; i < 7; i++ {
		if _, err := pods.Create(ctx, pod(fmt.Sprint("p", i), map[string]string{"even": fmt.Sprint(i%2 == 0)})); err != nil {
			t.Fatal(err)
		}
	}
	all, err := pods.ListAll(ctx, metav1.ListOptions{}, 2)
	if err != nil || len(all.Items) != 7 || all.ResourceVersion == "" {
		t.Fatalf("paged list: %v %d", err, len(all.Items))
	}
	even, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "even=true"})
	if err != nil || len(even.Items) != 4 {
		t.Fatalf("label selector: %v %d", err, len(even.Items))
	}
	one, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=p3"})
	if err != nil || len(one.Items) != 1 || one.Items[0].Name != "p3" {
		t.Fatalf("field selector: %v", err)
	}
	// Across namespaces.
	everywhere, err := client.Resource[*corev1.Pod](c, "pods").List(ctx, metav1.ListOptions{LabelSelector: "even"})
	if err != nil || len(everywhere.Items) < 7 {
		t.Fatalf("all namespaces: %v", err)
	}
}

// TestSharedPartsOverTheWire: a list and a watch with SharedParts in their context give the
// same objects as without, with the parts alike between pods shared; paging still works.
func TestSharedPartsOverTheWire(t *testing.T) {
	c := newClient(t)
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for i := range 5 {
		// Without the service-account token volume, whose random name, mounted into every
		// container, makes each pod's containers differ: these pods are to be alike.
		p := pod(fmt.Sprint("p", i), map[string]string{"app": "x"})
		p.Spec.AutomountServiceAccountToken = new(false)
		if _, err := pods.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	ctx := client.WithSharedParts(context.Background(), &client.SharedParts{})
	plain, err := pods.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := pods.ListAll(ctx, metav1.ListOptions{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(shared.Items) != 5 || shared.ResourceVersion != plain.ResourceVersion {
		t.Fatalf("shared list: %d items at %s, want 5 at %s", len(shared.Items), shared.ResourceVersion, plain.ResourceVersion)
	}
	for i := range plain.Items {
		if !apiequality.Semantic.DeepEqual(plain.Items[i], shared.Items[i]) {
			t.Fatalf("item %d differs:\n%v\n%v", i, plain.Items[i], shared.Items[i])
		}
	}
	first, last := shared.Items[1], shared.Items[4] // from different pages; the first pod's parts are only noted
	if &first.Spec.Containers[0] != &last.Spec.Containers[0] || reflect.ValueOf(first.Labels).UnsafePointer() != reflect.ValueOf(last.Labels).UnsafePointer() {
		t.Error("listed pods do not share their containers and labels")
	}

	send := true
	w, err := pods.Watch(ctx, metav1.ListOptions{SendInitialEvents: &send, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range plain.Items {
		ev := <-w.Events
		if ev.Type != watch.Added || ev.Object.Kind != "Pod" {
			t.Fatalf("watch event %d: %s %v", i, ev.Type, ev.Object)
		}
		got := ev.Object.DeepCopy()
		got.TypeMeta = metav1.TypeMeta{} // set on watched objects, not on list items
		if !apiequality.Semantic.DeepEqual(got, plain.Items[i]) {
			t.Fatalf("watch event %d differs:\n%v\n%v", i, got, plain.Items[i])
		}
		if &ev.Object.Spec.Containers[0] != &first.Spec.Containers[0] {
			t.Errorf("watched pod %s does not share the listed pods' containers", ev.Object.Name)
		}
	}
}

func TestWatch(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testNamespace(t, c)
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}); err != nil {
		t.Fatal(err)
	}
	send := true
	w, err := cms.Watch(ctx, metav1.ListOptions{SendInitialEvents: &send, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() client.Event[*corev1.ConfigMap] {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				t.Fatal("watch ended")
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		panic("unreachable")
	}
	if ev := next(); ev.Type != watch.Added || ev.Object.Name != "before" {
		t.Fatalf("initial event: %+v", ev)
	}
	if ev := next(); ev.Type != watch.Bookmark || ev.Object.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("end of initial events: %+v", ev)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != watch.Added || ev.Object.Name != "after" {
		t.Fatalf("live event: %+v", ev)
	}
	w.Stop()
	for range w.Events {
	}
}

// TestRetries: 429s are retried (honouring Retry-After) and a connection error on a GET is
// retried; a server that keeps refusing gets its error returned.
func TestRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"d"}}`)
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace("d").Get(context.Background(), "x")
	if err != nil || cm.Name != "x" || calls.Load() != 3 {
		t.Fatalf("after two 429s: %v, %d calls", err, calls.Load())
	}
}

// TestRateLimit: with QPS 4 and burst 1, five requests cannot all go out within the first second.
func TestRateLimit(t *testing.T) {
	cfg := client.Config{Host: server.URL, QPS: 4, Burst: 1}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := client.Resource[*corev1.Namespace](c, "namespaces")
	start := time.Now()
	for i := 0; i < 5; i++ {
		if _, err := ns.Get(context.Background(), "default"); err != nil {
			t.Fatal(err)
		}
	}
	if elapsed := time.Since(start); elapsed < 900*time.Millisecond {
		t.Fatalf("5 requests at 4 qps (burst 1) took only %v", elapsed)
	}
}

// TestWrongResourceIsAnError: a handle whose type does not match the resource it names fails
// instead of returning empty objects.
func TestWrongResourceIsAnError(t *testing.T) {
	c := newClient(t)
	wrong := client.Resource[*corev1.Pod](c, "services").Namespace("default")
	if _, err := wrong.List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("a pod handle on services listed without error")
	}
	if _, err := wrong.Get(context.Background(), "kubernetes"); err == nil {
		t.Fatal("a pod handle on services read the kubernetes service without error")
	}
}

func TestCreateSubresource(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods")
	if _, err := pods.Namespace(ns).Create(ctx, pod("p", nil)); err != nil {
		t.Fatal(err)
	}
	bind := func(node string) *corev1.Binding {
		return &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	}
	// The handle names no namespace: the Binding's is used.
	status := &metav1.Status{}
	if err := pods.CreateSubresource(ctx, "p", "binding", bind("node-1"), status); err != nil {
		t.Fatal(err)
	}
	if status.Status != metav1.StatusSuccess {
		t.Errorf("answer = %+v, want a success Status", status)
	}
	got, err := pods.Namespace(ns).Get(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "node-1" {
		t.Errorf("nodeName = %q, want node-1", got.Spec.NodeName)
	}
	for _, tc := range []struct {
		name, pod string
		check     func(error) bool
	}{
		{"already bound", "p", client.IsConflict},
		{"no such pod", "missing", client.IsNotFound},
	} {
		b := bind("node-2")
		b.Name = tc.pod
		if err := pods.Namespace(ns).CreateSubresource(ctx, tc.pod, "binding", b, nil); !tc.check(err) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}
