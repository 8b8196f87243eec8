package resourcequota

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/quota"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// These tests run the controller against the real apiserver, whose quota admission charges
// what the controller counts; no node agent runs, so a test plays the node where a pod must
// finish.

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

func TestOptions(t *testing.T) {
	type oc = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		oc{Name: "defaults", Set: func(*Options) {}},
		oc{Name: "periodic recount off", Set: func(o *Options) { o.SyncPeriod = 0 }},
		oc{Name: "no workers", Set: func(o *Options) { o.ConcurrentSyncs = 0 }, Flag: "--concurrent-resource-quota-syncs"},
		oc{Name: "negative period", Set: func(o *Options) { o.SyncPeriod = -time.Second }, Flag: "--resource-quota-sync-period"},
	)
	o := DefaultOptions()
	if o.ConcurrentSyncs != 5 || o.SyncPeriod != 5*time.Minute {
		t.Errorf("defaults %+v, want v1.36's 5 workers and 5m", o)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--concurrent-resource-quota-syncs=2", "--resource-quota-sync-period=30s"}); err != nil ||
		o.ConcurrentSyncs != 2 || o.SyncPeriod != 30*time.Second {
		t.Errorf("flags: %+v %v", o, err)
	}
	if _, err := New(&controller.Context{}, &Options{}); err == nil || !strings.Contains(err.Error(), "--concurrent-resource-quota-syncs") {
		t.Errorf("New with no workers: %v", err)
	}
	if Entry.Name != "resourcequota-controller" || len(Entry.Aliases) != 1 || Entry.Aliases[0] != "resourcequota" {
		t.Errorf("entry %s %v", Entry.Name, Entry.Aliases)
	}
}

// start runs a controller with the given sync period (0: the default).
func start(t *testing.T, period time.Duration) *Controller {
	t.Helper()
	return startWith(t, period, nil)
}

// startWith is start with discovery narrowed by hide (nil: none), which the test may change
// while the controller runs.
func startWith(t *testing.T, period time.Duration, hide func(schema.GroupVersionResource) bool) *Controller {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	if period > 0 {
		o.SyncPeriod = period
	}
	ctrl, err := New(cctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if hide != nil {
		ctrl.serverResources = testserver.Discovery(c, hide)
	}
	testserver.RunControllers(t, cctx, ctrl)
	return ctrl
}

func quotas(ns string) *client.Typed[*corev1.ResourceQuota] {
	return client.Resource[*corev1.ResourceQuota](c, "resourcequotas").Namespace(ns)
}

func pods(ns string) *client.Typed[*corev1.Pod] {
	return client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
}

func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		name, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	return out
}

func createQuota(t *testing.T, ns, name string, hard []string, scopes ...corev1.ResourceQuotaScope) {
	t.Helper()
	if _, err := quotas(ns).Create(context.Background(), &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ResourceQuotaSpec{Hard: list(hard...), Scopes: scopes}}); err != nil {
		t.Fatal(err)
	}
}

func createPod(t *testing.T, ns, name, cpu string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests = list("cpu=" + cpu)
	}
	out, err := pods(ns).Create(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitUsed waits until quota name's status enforces its spec and counts exactly used.
func waitUsed(t *testing.T, ns, name string, used ...string) {
	t.Helper()
	want := list(used...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		q, err := quotas(ns).Get(context.Background(), name)
		if err == nil && quota.Equal(q.Status.Hard, q.Spec.Hard) && quota.Equal(q.Status.Used, want) {
			return
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("hard %s, used %s", quota.Format(q.Status.Hard), quota.Format(q.Status.Used))
			}
			t.Fatalf("quota %s never counted %s; last: %v", name, quota.Format(want), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCountsWhatIsThere(t *testing.T) {
	// A recount reads the controller's caches, which may not have seen an object created a
	// moment before (as in Kubernetes); the periodic recount settles it.
	start(t, time.Second)
	ns := testserver.Namespace(t, c, "counts-")
	createPod(t, ns, "a", "250m")
	createPod(t, ns, "b", "500m")
	createPod(t, ns, "idle", "")
	for _, name := range []string{"x", "y"} {
		if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	createQuota(t, ns, "best-effort", []string{"pods=10"}, corev1.ResourceQuotaScopeBestEffort)
	createQuota(t, ns, "all", []string{"pods=10", "requests.cpu=4", "count/configmaps=5", "configmaps=5", "resourcequotas=3", "count/widgets.example.com=1"})
	// Counted by the controller: what existed before the quota, the quotas themselves; a
	// resource nothing serves has no usage.
	waitUsed(t, ns, "all", "pods=3", "requests.cpu=750m", "count/configmaps=2", "configmaps=2", "resourcequotas=2")
	waitUsed(t, ns, "best-effort", "pods=1")

	// A changed spec is enforced and counted.
	q, err := quotas(ns).Get(context.Background(), "all")
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard = list("pods=3", "limits.cpu=8")
	if _, err := quotas(ns).Update(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ns, "all", "pods=3", "limits.cpu=0")
}

func TestReleases(t *testing.T) {
	start(t, 0)
	ns := testserver.Namespace(t, c, "releases-")
	createQuota(t, ns, "compute", []string{"pods=2", "requests.cpu=1"})
	waitUsed(t, ns, "compute", "pods=0", "requests.cpu=0")

	// Admission charges; the quota fills.
	createPod(t, ns, "a", "400m")
	done := createPod(t, ns, "b", "400m")
	waitUsed(t, ns, "compute", "pods=2", "requests.cpu=800m")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
		Resources: corev1.ResourceRequirements{Requests: list("cpu=100m")}}}}}
	if _, err := pods(ns).Create(context.Background(), p); err == nil || !strings.Contains(err.Error(), "exceeded quota: compute") {
		t.Fatalf("third pod: %v", err)
	}

	// A pod that finished gives back its compute resources at once.
	done.Status.Phase = corev1.PodSucceeded
	if _, err := pods(ns).UpdateStatus(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ns, "compute", "pods=1", "requests.cpu=400m")
	// A deleted one too.
	if err := pods(ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ns, "compute", "pods=0", "requests.cpu=0")
	if _, err := pods(ns).Create(context.Background(), p); err != nil {
		t.Fatalf("pod after the release: %v", err)
	}
	waitUsed(t, ns, "compute", "pods=1", "requests.cpu=100m")
}

// TestPeriodicRecount: a usage nobody corrects on an event (written wrong by hand here, as an
// over-charge of a create that failed after admission would be) is recounted every period.
func TestPeriodicRecount(t *testing.T) {
	start(t, 300*time.Millisecond)
	ns := testserver.Namespace(t, c, "periodic-")
	createQuota(t, ns, "q", []string{"count/secrets=5"})
	waitUsed(t, ns, "q", "count/secrets=0")
	q, err := quotas(ns).Get(context.Background(), "q")
	if err != nil {
		t.Fatal(err)
	}
	q.Status.Used = list("count/secrets=4")
	if _, err := quotas(ns).UpdateStatus(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ns, "q", "count/secrets=0")
}
