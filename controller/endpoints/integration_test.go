package endpoints

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIntegrationEndpointsFollowPods(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-follow-")
	start(t, c, ns, nil)
	svc := createService(t, c, ns, namedHTTPService())

	a := createPod(t, c, ns, livePod("a"), "10.1.0.1", true)
	b := createPod(t, c, ns, livePod("b"), "10.1.0.2", false)
	createPod(t, c, ns, livePod("no-ip"), "", false)
	setStatus(t, c, createPod(t, c, ns, livePod("failed"), "", false), "10.1.0.4", true, corev1.PodFailed)
	createPod(t, c, ns, livePod("other-port", containerPorts(corev1.ContainerPort{Name: "metrics", ContainerPort: 9100, Protocol: corev1.ProtocolTCP})), "10.1.0.5", true)
	createPod(t, c, ns, livePod("other-app", podLabels(map[string]string{"app": "db"})), "10.1.0.6", true)

	http := eports(eport("http", 8080))
	ep := waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{
		Addresses: addrs(liveAddr(a, "10.1.0.1")), NotReadyAddresses: addrs(liveAddr(b, "10.1.0.2")), Ports: http,
	}})
	if ep.Labels[LabelManagedBy] != ControllerName {
		t.Errorf("labels = %v, want managed-by", ep.Labels)
	}
	if _, ok := ep.Labels[corev1.IsHeadlessService]; ok {
		t.Errorf("labels = %v: a service with a ClusterIP is not headless", ep.Labels)
	}
	// The last write was for a pod's new Ready condition.
	if _, ok := ep.Annotations[corev1.EndpointsLastChangeTriggerTime]; !ok {
		t.Errorf("annotations = %v, want a trigger time", ep.Annotations)
	}
	for _, s := range ep.Subsets {
		for _, a := range append(s.Addresses, s.NotReadyAddresses...) {
			if a.TargetRef.ResourceVersion != "" {
				t.Errorf("target %s carries resourceVersion %s", a.TargetRef.Name, a.TargetRef.ResourceVersion)
			}
		}
	}

	// b becomes ready.
	setStatus(t, c, b, "10.1.0.2", true, corev1.PodRunning)
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(a, "10.1.0.1"), liveAddr(b, "10.1.0.2")), Ports: http}})

	// a is deleted at once; b starts terminating (a bound pod gets a grace period).
	if err := podsAPI(c, ns).Delete(context.Background(), "a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(b, "10.1.0.2")), Ports: http}})
	if err := podsAPI(c, ns).Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ep = waitSubsets(t, c, ns, "web", nil)
	if ep.UID == "" || ep.Name != svc.Name {
		t.Errorf("endpoints %s/%s", ep.Namespace, ep.Name)
	}
}

func TestIntegrationHeadlessAndPublishNotReady(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-headless-")
	start(t, c, ns, nil)
	createService(t, c, ns, service(headless, withPorts(), withClusterIP(corev1.ClusterIPNone), withFamilies(), func(s *corev1.Service) { s.Name = "db" }))
	createService(t, c, ns, service(publishNotReady, withClusterIP(""), withFamilies(), func(s *corev1.Service) { s.Name = "all" }))

	named := func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = p.Name, "db" }
	r := createPod(t, c, ns, livePod("db-0", named), "10.2.0.1", true)
	u := createPod(t, c, ns, livePod("db-1", named), "10.2.0.2", false)
	withHost := func(a corev1.EndpointAddress, h string) corev1.EndpointAddress { a.Hostname = h; return a }

	ep := waitSubsets(t, c, ns, "db", []corev1.EndpointSubset{{
		Addresses:         addrs(withHost(liveAddr(r, "10.2.0.1"), "db-0")),
		NotReadyAddresses: addrs(withHost(liveAddr(u, "10.2.0.2"), "db-1")),
	}})
	if v, ok := ep.Labels[corev1.IsHeadlessService]; !ok || v != "" {
		t.Errorf("labels = %v, want the headless marker", ep.Labels)
	}
	// The other service lists the not-ready pod as ready, without hostnames (their subdomain
	// names the other service).
	waitSubsets(t, c, ns, "all", []corev1.EndpointSubset{{
		Addresses: addrs(liveAddr(r, "10.2.0.1"), liveAddr(u, "10.2.0.2")),
		Ports:     eports(eport("http", 8080)),
	}})
}

func TestIntegrationServiceDeletionDeletesEndpoints(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-delete-")
	start(t, c, ns, nil)
	createService(t, c, ns, namedHTTPService())
	p := createPod(t, c, ns, livePod("a"), "10.3.0.1", true)
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.3.0.1")), Ports: eports(eport("http", 8080))}})

	if err := servicesAPI(c, ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, ns, "web")

	// Deleting the Endpoints of a live service brings them back.
	createService(t, c, ns, namedHTTPService())
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.3.0.1")), Ports: eports(eport("http", 8080))}})
	if err := endpointsAPI(c, ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.3.0.1")), Ports: eports(eport("http", 8080))}})
}

func TestIntegrationLeftoversAndOthersEndpoints(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-leftover-")
	ctx := context.Background()
	manual := []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}}, Ports: eports(eport("http", 8080))}}
	mk := func(name string, annotations map[string]string) *corev1.Endpoints {
		ep, err := endpointsAPI(c, ns).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Subsets: manual})
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	// Before the controller starts: an orphan, an old leader-election lock, the hand-written
	// Endpoints of a service without selector, and Endpoints named like an ExternalName service.
	mk("orphan", nil)
	lock := mk("lock", map[string]string{leaderAnnotation: `{"holderIdentity":"x"}`})
	selectorless := mk("selectorless", nil)
	createService(t, c, ns, service(withClusterIP(""), withFamilies(), func(s *corev1.Service) { s.Name, s.Spec.Selector = "selectorless", nil }))
	ext := mk("ext", nil)
	createService(t, c, ns, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com", Selector: map[string]string{"app": "web"}},
	})
	p := createPod(t, c, ns, livePod("a"), "10.4.0.1", true)

	h := start(t, c, ns, nil)
	waitGone(t, c, ns, "orphan")
	// A normal service, to see the controller at work after the sweep.
	createService(t, c, ns, namedHTTPService())
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.4.0.1")), Ports: eports(eport("http", 8080))}})
	eventually(t, "syncs of the untouched services", func() (bool, string) {
		// orphan, selectorless, ext and web at least
		return h.syncs("success") >= 4, fmt.Sprint(h.syncs("success"))
	})

	for _, want := range []*corev1.Endpoints{lock, selectorless, ext} {
		got, err := endpointsAPI(c, ns).Get(ctx, want.Name)
		if err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		if got.ResourceVersion != want.ResourceVersion {
			t.Errorf("%s was written: resourceVersion %s → %s", want.Name, want.ResourceVersion, got.ResourceVersion)
		}
	}
}

func TestIntegrationUnchangedResyncWritesNothing(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-resync-")
	// Services resync every 100–200 ms.
	h := start(t, c, ns, func(cc *controller.Context, _ *Options) { cc.MinResyncPeriod = 100 * time.Millisecond })
	createService(t, c, ns, namedHTTPService())
	a := createPod(t, c, ns, livePod("a"), "10.5.0.1", true)
	b := createPod(t, c, ns, livePod("b"), "10.5.0.2", false)
	want := []corev1.EndpointSubset{{Addresses: addrs(liveAddr(a, "10.5.0.1")), NotReadyAddresses: addrs(liveAddr(b, "10.5.0.2")), Ports: eports(eport("http", 8080))}}
	ep := waitSubsets(t, c, ns, "web", want)

	// Changes that do not concern Endpoints: a pod's annotations, the service's annotations
	// (which does sync the service).
	a.Annotations = map[string]string{"touched": "yes"}
	if _, err := podsAPI(c, ns).Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	svc, err := servicesAPI(c, ns).Get(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"touched": "yes"}
	if _, err := servicesAPI(c, ns).Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	before := h.syncs("success")
	eventually(t, "resyncs", func() (bool, string) {
		return h.syncs("success") >= before+5, fmt.Sprint(h.syncs("success") - before)
	})
	got, err := endpointsAPI(c, ns).Get(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != ep.ResourceVersion {
		t.Errorf("endpoints rewritten without a change: resourceVersion %s → %s\n%s", ep.ResourceVersion, got.ResourceVersion, dump(got))
	}
}

func TestIntegrationRepairsEditedEndpoints(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-repair-")
	ctx := context.Background()
	start(t, c, ns, nil)
	createService(t, c, ns, namedHTTPService())
	p := createPod(t, c, ns, livePod("a"), "10.6.0.1", true)
	want := []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.6.0.1")), Ports: eports(eport("http", 8080))}}
	ep := waitSubsets(t, c, ns, "web", want)

	// Someone edits the Endpoints: other subsets, a label of their own, an annotation.
	ep.Subsets = []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.1"}}, Ports: eports(eport("http", 1))}}
	ep.Labels["mine"] = "x"
	ep.Annotations["note"] = "keep me"
	if _, err := endpointsAPI(c, ns).Update(ctx, ep); err != nil {
		t.Fatal(err)
	}
	// Edits to Endpoints are not watched for; the next change of the service repairs them.
	svc, err := servicesAPI(c, ns).Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	svc.Labels = map[string]string{"team": "a"}
	if _, err := servicesAPI(c, ns).Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	got := waitSubsets(t, c, ns, "web", want)
	eventually(t, "labels follow the service", func() (bool, string) {
		got, err = endpointsAPI(c, ns).Get(ctx, "web")
		if err != nil {
			return false, err.Error()
		}
		return got.Labels["team"] == "a", fmt.Sprint(got.Labels)
	})
	if _, ok := got.Labels["mine"]; ok {
		t.Errorf("labels = %v: the hand-added label survived", got.Labels)
	}
	if got.Annotations["note"] != "keep me" {
		t.Errorf("annotations = %v: the unrelated annotation was lost", got.Annotations)
	}
}

func TestIntegrationTerminatingNamespace(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-terminating-")
	ctx := context.Background()
	createService(t, c, ns, namedHTTPService())
	createPod(t, c, ns, livePod("a"), "10.7.0.1", true)
	if err := client.Resource[*corev1.Namespace](c, "namespaces").Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	h := start(t, c, ns, nil)
	eventually(t, "a sync of the service", func() (bool, string) {
		return h.syncs("success") >= 1, fmt.Sprint(h.syncs("success"), h.syncs("error"))
	})
	// Another sync, to give a retry loop time to show.
	svc, err := servicesAPI(c, ns).Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"touched": "yes"}
	if _, err := servicesAPI(c, ns).Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a second sync", func() (bool, string) {
		return h.syncs("success") >= 2, fmt.Sprint(h.syncs("success"), h.syncs("error"))
	})
	time.Sleep(200 * time.Millisecond)
	if n := h.syncs("error"); n != 0 {
		t.Errorf("%v failed syncs in a terminating namespace, want none", n)
	}
	if _, err := endpointsAPI(c, ns).Get(ctx, "web"); !client.IsNotFound(err) {
		t.Errorf("endpoints in a terminating namespace: err = %v", err)
	}
}

func TestIntegrationFailedWriteRecordsEventAndRetries(t *testing.T) {
	failing := &failingEndpointWrites{next: http.DefaultTransport}
	failing.left.Store(2)
	c := newTestClient(t, failing)
	ns := testserver.Namespace(t, c, "ep-fail-")
	h := start(t, c, ns, nil)
	createService(t, c, ns, namedHTTPService())
	p := createPod(t, c, ns, livePod("a"), "10.8.0.1", true)
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.8.0.1")), Ports: eports(eport("http", 8080))}})
	if n := h.syncs("error"); n < 2 {
		t.Errorf("%v failed syncs, want at least 2", n)
	}
	eventually(t, "a FailedToCreateEndpoint event", func() (bool, string) {
		list, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			seen = append(seen, ev.Reason)
			if ev.Reason == "FailedToCreateEndpoint" && ev.Type == corev1.EventTypeWarning &&
				ev.InvolvedObject.Name == "web" && ev.Source.Component == ControllerName {
				return true, ""
			}
		}
		return false, fmt.Sprint(seen)
	})
}

func TestIntegrationNoGoroutineLeft(t *testing.T) {
	transport := &http.Transport{}
	c := newTestClient(t, transport)
	ns := testserver.Namespace(t, c, "ep-leak-")
	transport.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()

	h := start(t, c, ns, func(_ *controller.Context, o *Options) { o.EndpointUpdatesBatchPeriod = time.Hour }) // a pending delayed add at stop
	createService(t, c, ns, namedHTTPService())
	waitSubsets(t, c, ns, "web", nil)
	createPod(t, c, ns, livePod("a"), "10.9.0.1", true)
	h.stop()
	transport.CloseIdleConnections()

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIntegrationPodChangesWaitForBatchPeriod: pod changes are queued after
// --endpoint-updates-batch-period, service changes at once.
func TestIntegrationPodChangesWaitForBatchPeriod(t *testing.T) {
	c := newTestClient(t, nil)
	ns := testserver.Namespace(t, c, "ep-batch-")
	ctx := context.Background()
	start(t, c, ns, func(_ *controller.Context, o *Options) { o.EndpointUpdatesBatchPeriod = time.Hour })
	createService(t, c, ns, namedHTTPService())
	waitSubsets(t, c, ns, "web", nil)
	p := createPod(t, c, ns, livePod("a"), "10.11.0.1", true)
	time.Sleep(300 * time.Millisecond)
	if ep, err := endpointsAPI(c, ns).Get(ctx, "web"); err != nil || len(ep.Subsets) != 0 {
		t.Fatalf("a pod change was synced before the batch period: %v %s", err, dump(ep))
	}
	svc, err := servicesAPI(c, ns).Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"touched": "yes"}
	if _, err := servicesAPI(c, ns).Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitSubsets(t, c, ns, "web", []corev1.EndpointSubset{{Addresses: addrs(liveAddr(p, "10.11.0.1")), Ports: eports(eport("http", 8080))}})
}
