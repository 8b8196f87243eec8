package servicelb

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These tests run the controller against the real apiserver. Each test works in its own
// namespace and runs its controllers on informers of that namespace only, so that the
// Services of one test never compete for the pool of another.

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

// start runs a controller with pool over the Services of ns until the test ends, or until
// stop is called.
func start(t *testing.T, ns, pool string) (ctrl *Controller, stop func()) {
	t.Helper()
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx.Informers = cache.NewFactory(c, ns)
	ctrl, err = New(cctx, &Options{LoadBalancerIPRange: pool, ConcurrentServiceSyncs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return ctrl, testserver.RunControllers(t, cctx, ctrl)
}

func namespace(t *testing.T) string { return testserver.Namespace(t, c, "lb-") }

func services(ns string) *client.Typed[*corev1.Service] {
	return client.Resource[*corev1.Service](c, "services").Namespace(ns)
}

func create(t *testing.T, ns, name string, change func(*corev1.Service)) *corev1.Service {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
	}}
	if change != nil {
		change(s)
	}
	out, err := services(ns).Create(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func get(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	s, err := services(ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// update applies change to the stored Service, retrying on conflicts.
func update(t *testing.T, ns, name string, change func(*corev1.Service)) {
	t.Helper()
	for range 10 {
		s := get(t, ns, name)
		change(s)
		_, err := services(ns).Update(context.Background(), s)
		if err == nil {
			return
		}
		if !client.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("update of %s/%s kept conflicting", ns, name)
}

func ingressIPs(s *corev1.Service) []string {
	var ips []string
	for _, ing := range s.Status.LoadBalancer.Ingress {
		ips = append(ips, ing.IP)
	}
	return ips
}

func describe(s *corev1.Service) string {
	return fmt.Sprintf("type %s finalizers %v ingress %+v", s.Spec.Type, s.Finalizers, s.Status.LoadBalancer.Ingress)
}

// waitFor polls cond on the stored Service until it holds.
func waitFor(t *testing.T, ns, name, what string, cond func(*corev1.Service) bool) *corev1.Service {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := services(ns).Get(context.Background(), name)
		if err != nil && !client.IsNotFound(err) {
			t.Fatal(err)
		}
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			state := "gone"
			if s != nil {
				state = describe(s)
			}
			t.Fatalf("%s/%s: timed out waiting for %s; last: %s", ns, name, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAddress waits until the Service shows ip (any address of the pool when "") with the
// finalizer, and returns it.
func waitAddress(t *testing.T, ns, name, ip string) string {
	t.Helper()
	s := waitFor(t, ns, name, "address "+ip, func(s *corev1.Service) bool {
		ips := ingressIPs(s)
		return s != nil && hasFinalizer(s) && len(ips) == 1 && (ip == "" || ips[0] == ip)
	})
	ing := s.Status.LoadBalancer.Ingress[0]
	if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeVIP || ing.Hostname != "" {
		t.Errorf("%s/%s: ingress %+v, want an IP in mode VIP", ns, name, ing)
	}
	return ing.IP
}

func waitReleased(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	return waitFor(t, ns, name, "no address and no finalizer", func(s *corev1.Service) bool {
		return s != nil && !hasFinalizer(s) && len(s.Status.LoadBalancer.Ingress) == 0
	})
}

func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	waitFor(t, ns, name, "deletion", func(s *corev1.Service) bool { return s == nil })
}

func remove(t *testing.T, ns, name string) {
	t.Helper()
	if err := services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventsOf returns "Type Reason: message" of the events about the Service name, with " (xN)"
// for an event recorded N > 1 times.
func eventsOf(t *testing.T, ns, name string) []string {
	t.Helper()
	l, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == "Service" {
			s := e.Type + " " + e.Reason + ": " + e.Message
			if e.Count > 1 {
				s += fmt.Sprintf(" (x%d)", e.Count)
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// waitEvent waits for an event about the Service name whose "Type Reason: message" has want.
func waitEvent(t *testing.T, ns, name, want string) string {
	t.Helper()
	var evs []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs = eventsOf(t, ns, name)
		for _, e := range evs {
			if strings.Contains(e, want) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: no event with %q; events: %q", ns, name, want, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// held is the address the controller holds for ns/name ("" for none).
func held(ctrl *Controller, ns, name string) string {
	addr, _, ok := ctrl.Allocator().Lookup(ns + "/" + name)
	if !ok {
		return ""
	}
	return addr.String()
}

// TestLifecycle: a LoadBalancer Service gets an address and the finalizer (and its NodePort
// from the API server); a change of type to ClusterIP releases the address, clears the status
// and removes the finalizer; back to LoadBalancer it gets one again; deleted, it goes and so
// does its address. Other Services are not touched.
func TestLifecycle(t *testing.T) {
	ns := namespace(t)
	ctrl, _ := start(t, ns, "192.0.2.0/29")
	web := create(t, ns, "web", nil)
	if np := web.Spec.Ports[0].NodePort; np == 0 {
		t.Errorf("the API server gave the LoadBalancer Service no NodePort: %+v", web.Spec.Ports)
	}
	plain := create(t, ns, "plain", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })

	if ip := waitAddress(t, ns, "web", ""); ip != "192.0.2.1" {
		t.Errorf("first address %s, want the pool's first, 192.0.2.1", ip)
	}
	waitEvent(t, ns, "web", "Normal EnsuringLoadBalancer: Ensuring load balancer")
	waitEvent(t, ns, "web", "Normal EnsuredLoadBalancer: Ensured load balancer")
	if got := held(ctrl, ns, "web"); got != "192.0.2.1" {
		t.Errorf("the controller holds %q for web", got)
	}
	// Its own writes coming back do not make the controller ensure it again.
	time.Sleep(200 * time.Millisecond)
	if evs := eventsOf(t, ns, "web"); !slices.Equal(evs, []string{
		"Normal EnsuredLoadBalancer: Ensured load balancer", "Normal EnsuringLoadBalancer: Ensuring load balancer"}) {
		t.Errorf("events %q, want one of each", evs)
	}

	update(t, ns, "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	s := waitReleased(t, ns, "web")
	if s.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("type %s", s.Spec.Type)
	}
	waitEvent(t, ns, "web", "Normal DeletingLoadBalancer: Deleting load balancer")
	waitEvent(t, ns, "web", "Normal DeletedLoadBalancer: Deleted load balancer")
	if got := held(ctrl, ns, "web"); got != "" {
		t.Errorf("the controller still holds %s for web", got)
	}

	// Another Service takes the freed address; web, back to LoadBalancer, gets the next.
	create(t, ns, "api", nil)
	if ip := waitAddress(t, ns, "api", ""); ip != "192.0.2.1" {
		t.Errorf("api got %s, want the freed 192.0.2.1", ip)
	}
	update(t, ns, "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })
	if ip := waitAddress(t, ns, "web", ""); ip != "192.0.2.2" {
		t.Errorf("web got %s, want 192.0.2.2", ip)
	}

	remove(t, ns, "web")
	waitGone(t, ns, "web")
	testserver.Eventually(t, "web's address released", 5*time.Second, func() bool { return held(ctrl, ns, "web") == "" })
	if key, taken := ctrl.Allocator().Holder(netip.MustParseAddr("192.0.2.2")); taken {
		t.Errorf("web's address still held by %s", key)
	}

	p := get(t, ns, plain.Name)
	if len(p.Finalizers) > 0 || len(p.Status.LoadBalancer.Ingress) > 0 || len(eventsOf(t, ns, plain.Name)) > 0 {
		t.Errorf("a ClusterIP Service was touched: %s, events %q", describe(p), eventsOf(t, ns, plain.Name))
	}
}

// TestRequestedAddress: spec.loadBalancerIP is honoured when it is in the pool and free; one
// outside the pool, or held by another Service, leaves the Service pending with a Warning
// event until it can be given (the holder gone) or the request changes.
func TestRequestedAddress(t *testing.T) {
	ns := namespace(t)
	start(t, ns, "192.0.2.10-192.0.2.19")
	create(t, ns, "asks", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.15" })
	waitAddress(t, ns, "asks", "192.0.2.15")

	create(t, ns, "outside", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.1" })
	e := waitEvent(t, ns, "outside", "Warning SyncLoadBalancerFailed")
	if !strings.Contains(e, "198.51.100.1 is not in the pool 192.0.2.10-192.0.2.19") {
		t.Errorf("event %q, want one naming the address and the pool", e)
	}
	if s := get(t, ns, "outside"); len(s.Status.LoadBalancer.Ingress) > 0 || !hasFinalizer(s) {
		t.Errorf("outside: %s, want pending with the finalizer", describe(s))
	}
	update(t, ns, "outside", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "" })
	if ip := waitAddress(t, ns, "outside", ""); ip != "192.0.2.10" {
		t.Errorf("outside, without its request: %s, want 192.0.2.10", ip)
	}

	create(t, ns, "same", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.15" })
	e = waitEvent(t, ns, "same", "Warning SyncLoadBalancerFailed")
	if !strings.Contains(e, "192.0.2.15 is in use by the Service "+ns+"/asks") {
		t.Errorf("event %q, want one naming the holder", e)
	}
	remove(t, ns, "asks")
	waitAddress(t, ns, "same", "192.0.2.15")

	// A new request moves the Service to that address; the old one is free again.
	update(t, ns, "same", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.19" })
	waitAddress(t, ns, "same", "192.0.2.19")
	create(t, ns, "next", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.15" })
	waitAddress(t, ns, "next", "192.0.2.15")
}

// TestPoolExhausted: with one address and two Services, the second waits with a Warning event
// naming the pool, and gets the address once the first is deleted.
func TestPoolExhausted(t *testing.T) {
	ns := namespace(t)
	start(t, ns, "192.0.2.100/32")
	create(t, ns, "first", nil)
	waitAddress(t, ns, "first", "192.0.2.100")
	create(t, ns, "second", nil)
	e := waitEvent(t, ns, "second", "Warning SyncLoadBalancerFailed")
	if !strings.Contains(e, "no free address in the pool 192.0.2.100/32") {
		t.Errorf("event %q, want one naming the pool", e)
	}
	if s := get(t, ns, "second"); len(s.Status.LoadBalancer.Ingress) > 0 || !hasFinalizer(s) {
		t.Errorf("second: %s, want pending with the finalizer", describe(s))
	}
	// Its retries wait 5 s and more by now: the release itself must hand the address on.
	time.Sleep(200 * time.Millisecond)
	remove(t, ns, "first")
	waitGone(t, ns, "first")
	begin := time.Now()
	waitAddress(t, ns, "second", "192.0.2.100")
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("the waiting Service got the freed address after %v, not at its release", d)
	}
}

// TestOtherClass: a Service with a loadBalancerClass belongs to another implementation: no
// finalizer, no address, no event, and the status that implementation writes stays.
func TestOtherClass(t *testing.T) {
	ns := namespace(t)
	start(t, ns, "192.0.2.0/28")
	create(t, ns, "theirs", func(s *corev1.Service) { s.Spec.LoadBalancerClass = new("example.com/other") })
	create(t, ns, "ours", nil)
	waitAddress(t, ns, "ours", "192.0.2.1")
	s := get(t, ns, "theirs")
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.2"}}
	if _, err := services(ns).UpdateStatus(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	// A Service created after it still gets 192.0.2.2: the other class' status is not ours.
	create(t, ns, "later", nil)
	waitAddress(t, ns, "later", "192.0.2.2")
	time.Sleep(300 * time.Millisecond)
	s = get(t, ns, "theirs")
	if hasFinalizer(s) || !slices.Equal(ingressIPs(s), []string{"192.0.2.2"}) || len(eventsOf(t, ns, "theirs")) > 0 {
		t.Errorf("theirs was touched: %s, events %q", describe(s), eventsOf(t, ns, "theirs"))
	}
}

// TestRestart: a new controller (a restart, or another replica taking the lead) rebuilds who
// holds which address from the Services' status before it hands out any: each keeps its
// address, and a Service created meanwhile gets a free one.
func TestRestart(t *testing.T) {
	ns := namespace(t)
	pool := "192.0.2.0/29"
	_, stop := start(t, ns, pool)
	create(t, ns, "a", nil)
	create(t, ns, "b", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.4" })
	waitAddress(t, ns, "a", "192.0.2.1")
	waitAddress(t, ns, "b", "192.0.2.4")
	stop()

	// While no controller runs: a new Service, and a Service whose status names an address
	// of the pool that no controller gave (another tool's, restored as it is).
	create(t, ns, "c", nil)
	create(t, ns, "d", func(s *corev1.Service) { s.Finalizers = []string{Finalizer} })
	d := get(t, ns, "d")
	d.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.2"}}
	if _, err := services(ns).UpdateStatus(context.Background(), d); err != nil {
		t.Fatal(err)
	}

	ctrl, _ := start(t, ns, pool)
	if ip := waitAddress(t, ns, "c", ""); ip != "192.0.2.3" {
		t.Errorf("c got %s, want 192.0.2.3, the first address no Service shows", ip)
	}
	for name, ip := range map[string]string{"a": "192.0.2.1", "b": "192.0.2.4", "d": "192.0.2.2"} {
		if got := held(ctrl, ns, name); got != ip {
			t.Errorf("after the restart the controller holds %q for %s, want %s", got, name, ip)
		}
		if s := get(t, ns, name); !slices.Equal(ingressIPs(s), []string{ip}) {
			t.Errorf("%s: %s, want %s kept", name, describe(s), ip)
		}
	}
}

// TestDeleteWithOtherFinalizer: a Service held by another finalizer stops showing its address
// when the cleanup releases it, so that the address can go to another without two Services
// showing it.
func TestDeleteWithOtherFinalizer(t *testing.T) {
	ns := namespace(t)
	start(t, ns, "192.0.2.50/32")
	create(t, ns, "held", func(s *corev1.Service) { s.Finalizers = []string{"example.com/hold"} })
	waitAddress(t, ns, "held", "192.0.2.50")
	remove(t, ns, "held")
	s := waitFor(t, ns, "held", "the cleanup", func(s *corev1.Service) bool {
		return s != nil && !hasFinalizer(s) && len(s.Status.LoadBalancer.Ingress) == 0
	})
	if s.DeletionTimestamp == nil || !slices.Equal(s.Finalizers, []string{"example.com/hold"}) {
		t.Errorf("held: %s, deletion %v", describe(s), s.DeletionTimestamp)
	}
	create(t, ns, "next", nil)
	waitAddress(t, ns, "next", "192.0.2.50")
	update(t, ns, "held", func(s *corev1.Service) { s.Finalizers = nil })
	waitGone(t, ns, "held")
}

func TestOptions(t *testing.T) {
	type o = testserver.OptionsCase[*Options]
	testserver.CheckOptions(t, DefaultOptions,
		o{Name: "defaults (off)", Set: func(*Options) {}},
		o{Name: "a CIDR", Set: func(o *Options) { o.LoadBalancerIPRange = "127.0.100.0/24" }},
		o{Name: "a range", Set: func(o *Options) { o.LoadBalancerIPRange = "192.0.2.1-192.0.2.9" }},
		o{Name: "not a range", Set: func(o *Options) { o.LoadBalancerIPRange = "192.0.2.1" }, Flag: "--load-balancer-ip-range"},
		o{Name: "IPv6", Set: func(o *Options) { o.LoadBalancerIPRange = "2001:db8::/64" }, Flag: "--load-balancer-ip-range"},
		o{Name: "no workers", Set: func(o *Options) { o.ConcurrentServiceSyncs = 0 }, Flag: "--concurrent-service-syncs"},
	)
}

// TestOffWithoutPool: without a pool the manager builds no controller; with a bad one, none
// either, and the error names the flag.
func TestOffWithoutPool(t *testing.T) {
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ctrl, err := Entry.New(cctx, DefaultOptions()); ctrl != nil || err != nil {
		t.Errorf("without a pool: %v, %v; want no controller and no error", ctrl, err)
	}
	ctrl, err := Entry.New(cctx, &Options{LoadBalancerIPRange: "192.0.2.9/24", ConcurrentServiceSyncs: 1})
	if ctrl != nil || err == nil || !strings.Contains(err.Error(), "--load-balancer-ip-range") {
		t.Errorf("with a bad pool: %v, %v; want an error naming the flag", ctrl, err)
	}
}
