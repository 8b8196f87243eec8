package endpoints

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestEntry(t *testing.T) {
	if Entry.Name != "endpoints-controller" || !slices.Contains(Entry.Aliases, "endpoint") || Entry.Disabled {
		t.Errorf("entry %q disabled=%v", Entry.Name, Entry.Disabled)
	}
	o, ok := Entry.Options().(*Options)
	if !ok {
		t.Fatalf("Entry.Options() is a %T", Entry.Options())
	}
	if o.ConcurrentEndpointSyncs != 5 || o.EndpointUpdatesBatchPeriod != 0 {
		t.Errorf("default options = %+v, want 5 workers and no batch period", *o)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--concurrent-endpoint-syncs=7", "--endpoint-updates-batch-period=2s"}); err != nil {
		t.Fatal(err)
	}
	if o.ConcurrentEndpointSyncs != 7 || o.EndpointUpdatesBatchPeriod != 2*time.Second {
		t.Errorf("options after flags = %+v, want 7 workers and 2s", *o)
	}
	if _, err := Entry.New(&controller.Context{}, Entry.Options()); err == nil {
		t.Error("New accepted a context without client and informers")
	}
	c := newTestClient(t, nil)
	cc, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := Entry.Start(cc)
	if err != nil {
		t.Fatal(err)
	}
	if ctl.Name() != "endpoint" {
		t.Errorf("Name() = %q", ctl.Name())
	}
	// Never run: Run with a cancelled context returns at once and releases the queue.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ctl.Run(ctx); err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestIntegrationSyncDirectly calls sync by hand on a controller that is not running, with
// its caches synced, to pin down what one sync of one key does.
func TestIntegrationSyncDirectly(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-direct-")
	ctx, cancel := context.WithCancel(context.Background())
	cc, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc.Informers = cache.NewFactory(c, ns)
	ctl, err := New(cc, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	cc.Informers.Start(ctx)
	t.Cleanup(func() { cancel(); cc.Informers.Shutdown(); ctl.loop.Queue.ShutDown() })

	manual := []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}}, Ports: eports(eport("http", 8080))}}
	mkEndpoints := func(name string) *corev1.Endpoints {
		ep, err := endpointsAPI(c, ns).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name}, Subsets: manual})
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	ext := mkEndpoints("ext")
	createService(t, c, ns, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com", Selector: map[string]string{"app": "web"}},
	})
	selectorless := mkEndpoints("selectorless")
	createService(t, c, ns, service(withClusterIP(""), withFamilies(), func(s *corev1.Service) { s.Name, s.Spec.Selector = "selectorless", nil }))
	mkEndpoints("orphan")
	createService(t, c, ns, namedHTTPService())
	p := createPod(t, c, ns, livePod("a"), "10.10.0.1", true)

	// Wait until the caches hold all of it.
	eventually(t, "caches", func() (bool, string) {
		pods := ctl.pods.Lister().Namespace(ns).List(labels.Everything())
		svcs := ctl.services.Lister().Namespace(ns).List(labels.Everything())
		eps := ctl.endpoints.Lister().Namespace(ns).List(labels.Everything())
		return len(pods) == 1 && len(pods[0].Status.PodIPs) == 1 && len(svcs) == 3 && len(eps) == 3, fmt.Sprint(len(pods), len(svcs), len(eps))
	})
	key := func(name string) string { return ns + "/" + name }
	mustSync := func(name string) {
		t.Helper()
		if err := ctl.sync(ctx, key(name)); err != nil {
			t.Fatalf("sync %s: %v", name, err)
		}
	}
	unchanged := func(want *corev1.Endpoints) {
		t.Helper()
		got, err := endpointsAPI(c, ns).Get(ctx, want.Name)
		if err != nil || got.ResourceVersion != want.ResourceVersion {
			t.Errorf("%s: err %v, resourceVersion %s → %s", want.Name, err, want.ResourceVersion, got.ResourceVersion)
		}
	}

	// ExternalName and selector-less services: their Endpoints are not ours.
	mustSync("ext")
	mustSync("selectorless")
	unchanged(ext)
	unchanged(selectorless)

	// No service: the Endpoints go; twice is fine.
	mustSync("orphan")
	mustSync("orphan")
	if _, err := endpointsAPI(c, ns).Get(ctx, "orphan"); !client.IsNotFound(err) {
		t.Errorf("orphan: err = %v, want NotFound", err)
	}

	// A selector service: created, then left alone once the cache has it.
	mustSync("web")
	var created *corev1.Endpoints
	eventually(t, "the cache sees the created endpoints", func() (bool, string) {
		ep, err := ctl.endpoints.Lister().Namespace(ns).Get("web")
		created = ep
		return err == nil, fmt.Sprint(err)
	})
	if want := []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.10.0.1")), Ports: eports(eport("http", 8080))}}; !equalSubsets(created.Subsets, want) {
		t.Errorf("created %s", dump(created.Subsets))
	}
	mustSync("web")
	unchanged(created)

	// The cache still showing a version our own update replaced: error, no write.
	ctl.stale.replacedBy(key("web"), created.ResourceVersion)
	if err := ctl.sync(ctx, key("web")); err == nil || !strings.Contains(err.Error(), "behind") {
		t.Errorf("sync with a stale cache: err = %v", err)
	}
	ctl.stale.forget(key("web"))

	// A malformed key is dropped, not retried.
	if err := ctl.sync(ctx, "a/b/c"); err != nil {
		t.Errorf("malformed key: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	type c = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		c{Name: "defaults", Set: func(*Options) {}, Flag: ""},
		c{Name: "no workers", Set: func(o *Options) { o.ConcurrentEndpointSyncs = 0 }, Flag: "--concurrent-endpoint-syncs"},
		c{Name: "negative batch period", Set: func(o *Options) { o.EndpointUpdatesBatchPeriod = -time.Second }, Flag: "--endpoint-updates-batch-period"},
	)
}
