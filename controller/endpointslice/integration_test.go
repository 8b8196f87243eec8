package endpointslice

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Pods in every state a Service's pods can be in converge to the endpoints Kubernetes writes.
func TestIntegrationPodStates(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	n1, n2 := cl.node("n1", "zone-a"), cl.node("n2", "zone-b")
	svc := cl.service("web")

	cl.pod(podSpec{name: "ready", app: "web", node: n1, ips: []string{"10.2.0.1"}, ready: true})
	cl.pod(podSpec{name: "unready", app: "web", node: n2, ips: []string{"10.2.0.2"}})
	cl.pod(podSpec{name: "leaving", app: "web", node: n1, ips: []string{"10.2.0.3"}, ready: true})
	cl.pod(podSpec{name: "failed", app: "web", node: n1, ips: []string{"10.2.0.4"}, phase: corev1.PodFailed})
	cl.pod(podSpec{name: "done", app: "web", node: n1, ips: []string{"10.2.0.5"}, phase: corev1.PodSucceeded})
	cl.pod(podSpec{name: "no-ip", app: "web", node: n1, phase: corev1.PodPending})
	cl.pod(podSpec{name: "dual", app: "web", node: n2, ips: []string{"10.2.0.6", "fd00::6"}, ready: true})
	cl.pod(podSpec{name: "named", app: "web", node: n1, ips: []string{"10.2.0.7"}, ready: true, mods: []func(*corev1.Pod){
		func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "h7", "web" },
	}})
	cl.pod(podSpec{name: "other-app", app: "other", node: n1, ips: []string{"10.2.0.8"}, ready: true})
	cl.deletePod("leaving", 30) // bound and running: it terminates for 30 s

	got := cl.waitEndpoints("web",
		"ready 10.2.0.1 r=true s=true t=false node="+n1+" zone=zone-a ports=http:8080",
		"unready 10.2.0.2 r=false s=false t=false node="+n2+" zone=zone-b ports=http:8080",
		"leaving 10.2.0.3 r=false s=true t=true node="+n1+" zone=zone-a ports=http:8080",
		"dual 10.2.0.6 r=true s=true t=false node="+n2+" zone=zone-b ports=http:8080",
		"named 10.2.0.7 r=true s=true t=false node="+n1+" zone=zone-a host=h7 ports=http:8080",
	)
	if len(got) != 1 {
		t.Fatalf("want one slice, got %d", len(got))
	}
	s := got[0]
	wantLabels := map[string]string{"team": "a", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName}
	if !maps.Equal(s.Labels, wantLabels) {
		t.Errorf("labels: got %v, want %v", s.Labels, wantLabels)
	}
	if !strings.HasPrefix(s.Name, "web-") || s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("name %q, address type %s", s.Name, s.AddressType)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != svc.UID || !deref(s.OwnerReferences[0].Controller) ||
		!deref(s.OwnerReferences[0].BlockOwnerDeletion) || s.OwnerReferences[0].Kind != "Service" {
		t.Errorf("owner references: %+v", s.OwnerReferences)
	}
	// The last write may have been caused by a change without a timestamp (the graceful
	// deletion), which clears the annotation; when present it must be a time.
	if v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			t.Errorf("trigger time annotation: %v", err)
		}
	}
	if p := s.Ports; len(p) != 1 || deref(p[0].Protocol) != corev1.ProtocolTCP || deref(p[0].Name) != "http" || deref(p[0].Port) != 8080 {
		t.Errorf("ports: %s", dump(p))
	}
}

func TestIntegrationReadinessAndDeletion(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	n := cl.node("n", "zone-a")
	cl.service("web")
	cl.pod(podSpec{name: "a", app: "web", node: n, ips: []string{"10.3.0.1"}, ready: true})
	cl.pod(podSpec{name: "b", app: "web", node: n, ips: []string{"10.3.0.2"}, ready: true})
	ready := func(name, ip string) string {
		return name + " " + ip + " r=true s=true t=false node=" + n + " zone=zone-a ports=http:8080"
	}
	cl.waitEndpoints("web", ready("a", "10.3.0.1"), ready("b", "10.3.0.2"))

	cl.setReady("a", false)
	cl.waitEndpoints("web", "a 10.3.0.1 r=false s=false t=false node="+n+" zone=zone-a ports=http:8080", ready("b", "10.3.0.2"))
	cl.setReady("a", true)
	cl.waitEndpoints("web", ready("a", "10.3.0.1"), ready("b", "10.3.0.2"))

	cl.deletePod("a", 30)
	cl.waitEndpoints("web", "a 10.3.0.1 r=false s=true t=true node="+n+" zone=zone-a ports=http:8080", ready("b", "10.3.0.2"))
	cl.deletePod("a", 0)
	cl.waitEndpoints("web", ready("b", "10.3.0.2"))

	// The last pod gone: one placeholder slice, without ports or endpoints.
	cl.deletePod("b", 0)
	eventually(t, func() string {
		ss := cl.slicesOf("web")
		if len(ss) != 1 || len(ss[0].Endpoints) != 0 || len(ss[0].Ports) != 0 {
			return fmt.Sprintf("want one empty placeholder, got %s", dump(ss))
		}
		return ""
	})
}

func TestIntegrationSplitAcrossSlices(t *testing.T) {
	cl := newCluster(t)
	startController(t, func(_ *controller.Context, o *Options) { o.MaxEndpointsPerSlice = 3 })
	n := cl.node("n", "zone-a")
	cl.service("web")
	var want []string
	for i := range 7 {
		name, ip := fmt.Sprintf("p%d", i), fmt.Sprintf("10.4.0.%d", i+1)
		cl.pod(podSpec{name: name, app: "web", node: n, ips: []string{ip}, ready: true})
		want = append(want, name+" "+ip+" r=true s=true t=false node="+n+" zone=zone-a ports=http:8080")
	}
	got := cl.waitEndpoints("web", want...)
	for _, s := range got {
		if len(s.Endpoints) > 3 {
			t.Errorf("slice %s has %d endpoints, limit 3", s.Name, len(s.Endpoints))
		}
	}
	if len(got) < 3 {
		t.Errorf("7 endpoints in %d slices of at most 3", len(got))
	}

	// Scaling down keeps every remaining endpoint exactly once, within the limit.
	for i := range 5 {
		cl.deletePod(fmt.Sprintf("p%d", i), 0)
	}
	got = cl.waitEndpoints("web", want[5:]...)
	for _, s := range got {
		if len(s.Endpoints) > 3 {
			t.Errorf("slice %s has %d endpoints, limit 3", s.Name, len(s.Endpoints))
		}
	}
}

func TestIntegrationPlaceholderAndHeadless(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	cl.service("empty")
	cl.service("headless", func(s *corev1.Service) {
		s.Spec.ClusterIP = corev1.ClusterIPNone
		s.Labels[discoveryv1.LabelManagedBy] = "someone-else" // reserved: not copied
	})
	for _, name := range []string{"empty", "headless"} {
		eventually(t, func() string {
			ss := cl.slicesOf(name)
			if len(ss) != 1 || len(ss[0].Endpoints) != 0 || len(ss[0].Ports) != 0 {
				return fmt.Sprintf("%s: want one placeholder, got %s", name, dump(ss))
			}
			return ""
		})
	}
	h := cl.slicesOf("headless")[0]
	want := map[string]string{"team": "a", discoveryv1.LabelServiceName: "headless", discoveryv1.LabelManagedBy: ControllerName, corev1.IsHeadlessService: ""}
	if !maps.Equal(h.Labels, want) {
		t.Errorf("headless labels: got %v, want %v", h.Labels, want)
	}
}

// A converged Service is left alone: by resyncs, and by a restarted controller.
func TestIntegrationNoWritesWhenNothingChanges(t *testing.T) {
	cl := newCluster(t)
	r := startController(t, func(cc *controller.Context, _ *Options) { cc.MinResyncPeriod = 200 * time.Millisecond })
	n := cl.node("n", "zone-a")
	cl.service("web", func(s *corev1.Service) {
		s.Spec.TrafficDistribution = new(corev1.ServiceTrafficDistributionPreferClose)
	})
	cl.service("empty")
	for i := range 4 {
		cl.pod(podSpec{name: fmt.Sprintf("p%d", i), app: "web", node: n, ips: []string{fmt.Sprintf("10.5.0.%d", i+1)}, ready: i != 0})
	}
	cl.waitEndpoints("web",
		"p0 10.5.0.1 r=false s=false t=false node="+n+" zone=zone-a ports=http:8080",
		"p1 10.5.0.2 r=true s=true t=false node="+n+" zone=zone-a hints=zone:zone-a ports=http:8080",
		"p2 10.5.0.3 r=true s=true t=false node="+n+" zone=zone-a hints=zone:zone-a ports=http:8080",
		"p3 10.5.0.4 r=true s=true t=false node="+n+" zone=zone-a hints=zone:zone-a ports=http:8080",
	)
	eventually(t, func() string {
		if len(cl.slicesOf("empty")) != 1 {
			return "no placeholder yet"
		}
		return ""
	})
	// Let the syncs caused by the controller's own writes run out, then watch the resyncs.
	time.Sleep(1500 * time.Millisecond)
	before := map[string]map[string]string{"web": cl.resourceVersions("web"), "empty": cl.resourceVersions("empty")}
	syncs := counterValue(r.ctl.metrics.syncs.WithLabelValues("success"))
	time.Sleep(2 * time.Second)
	if after := counterValue(r.ctl.metrics.syncs.WithLabelValues("success")); after < syncs+4 {
		t.Errorf("expected resyncs: %v successful syncs before, %v after", syncs, after)
	}
	for svc, rvs := range before {
		if now := cl.resourceVersions(svc); !maps.Equal(now, rvs) {
			t.Errorf("%s: slices changed by resyncs: %v → %v", svc, rvs, now)
		}
	}

	r.stop()
	r = startController(t, nil)
	time.Sleep(2 * time.Second) // the first syncs come at once; slice events after 1 s
	for svc, rvs := range before {
		if now := cl.resourceVersions(svc); !maps.Equal(now, rvs) {
			t.Errorf("%s: slices changed by a restarted controller: %v → %v", svc, rvs, now)
		}
	}
	if n := counterValue(r.ctl.metrics.syncs.WithLabelValues("success")); n == 0 {
		t.Error("the restarted controller synced nothing")
	}
}

// Slices changed or deleted by someone else are put back.
func TestIntegrationRepairsSlices(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	n := cl.node("n", "zone-a")
	svc := cl.service("web")
	cl.pod(podSpec{name: "a", app: "web", node: n, ips: []string{"10.6.0.1"}, ready: true})
	cl.pod(podSpec{name: "b", app: "web", node: n, ips: []string{"10.6.0.2"}, ready: true})
	want := []string{
		"a 10.6.0.1 r=true s=true t=false node=" + n + " zone=zone-a ports=http:8080",
		"b 10.6.0.2 r=true s=true t=false node=" + n + " zone=zone-a ports=http:8080",
	}
	got := cl.waitEndpoints("web", want...)
	ctx := context.Background()

	// Deleted: recreated.
	if err := cl.slices().Delete(ctx, got[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		ss := cl.slicesOf("web")
		if len(ss) == 1 && ss[0].UID != got[0].UID && slices.Equal(describeEndpoints(ss), want) {
			return ""
		}
		return fmt.Sprintf("not recreated: %s", dump(ss))
	})

	// Endpoints edited: put back.
	s := cl.slicesOf("web")[0]
	s.Endpoints = s.Endpoints[:1]
	s.Endpoints[0].Conditions.Ready = new(false)
	if _, err := cl.slices().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	cl.waitEndpoints("web", want...)

	// Owner reference removed: the slice is not the Service's any more; it is replaced.
	s = cl.slicesOf("web")[0]
	s.OwnerReferences = nil
	if _, err := cl.slices().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		ss := cl.slicesOf("web")
		if len(ss) == 1 && len(ss[0].OwnerReferences) == 1 && ss[0].OwnerReferences[0].UID == svc.UID && slices.Equal(describeEndpoints(ss), want) {
			return ""
		}
		return fmt.Sprintf("not replaced: %s", dump(ss))
	})

	// A slice of an address type the Service does not have, and a legacy FQDN one: deleted.
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN} {
		stray := newSlice(svc, httpPort(8080), at)
		if _, err := cl.slices().Create(ctx, stray); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, func() string {
		ss := cl.slicesOf("web")
		if len(ss) == 1 && ss[0].AddressType == discoveryv1.AddressTypeIPv4 {
			return ""
		}
		return fmt.Sprintf("stray slices left: %s", dump(ss))
	})

	// Service labels changed: the slices follow.
	cur, err := cl.services().Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	cur.Labels = map[string]string{"team": "b", "tier": "front"}
	if _, err := cl.services().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		ss := cl.slicesOf("web")
		if len(ss) == 1 && ss[0].Labels["team"] == "b" && ss[0].Labels["tier"] == "front" {
			return ""
		}
		return fmt.Sprintf("labels not updated: %s", dump(ss))
	})

	// Taken over by someone else (managed-by changed): left to them, and replaced.
	s = cl.slicesOf("web")[0]
	s.Labels[discoveryv1.LabelManagedBy] = "someone-else"
	if _, err := cl.slices().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	cl.waitEndpoints("web", want...)
	if kept, err := cl.slices().Get(ctx, s.Name); err != nil || kept.Labels[discoveryv1.LabelManagedBy] != "someone-else" {
		t.Errorf("the taken-over slice was touched: %v %s", err, dump(kept))
	}
	// …and the Service is still served: a new pod shows up.
	cl.pod(podSpec{name: "c", app: "web", node: n, ips: []string{"10.6.0.3"}, ready: true})
	cl.waitEndpoints("web", append(want, "c 10.6.0.3 r=true s=true t=false node="+n+" zone=zone-a ports=http:8080")...)
}

// A named target port resolving to different numbers puts the pods in different slices; a pod
// that does not declare it at all gets a slice without that port.
func TestIntegrationNamedPorts(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	n := cl.node("n", "")
	cl.service("web", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("web") })
	withPort := func(port int32) []func(*corev1.Pod) {
		return []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "web", ContainerPort: port, Protocol: corev1.ProtocolTCP}}
		}}
	}
	cl.pod(podSpec{name: "a", app: "web", node: n, ips: []string{"10.7.0.1"}, ready: true, mods: withPort(9000)})
	cl.pod(podSpec{name: "b", app: "web", node: n, ips: []string{"10.7.0.2"}, ready: true, mods: withPort(9001)})
	cl.pod(podSpec{name: "c", app: "web", node: n, ips: []string{"10.7.0.3"}, ready: true})
	got := cl.waitEndpoints("web",
		"a 10.7.0.1 r=true s=true t=false node="+n+" zone= ports=http:9000",
		"b 10.7.0.2 r=true s=true t=false node="+n+" zone= ports=http:9001",
		"c 10.7.0.3 r=true s=true t=false node="+n+" zone= ports=",
	)
	if len(got) != 3 {
		t.Errorf("want 3 slices, got %d", len(got))
	}
}

// A pod whose Node is missing is left out (and the failure reported) until the Node appears.
func TestIntegrationMissingNode(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	n := cl.node("n", "zone-a")
	later := cl.ns + "-later"
	svc := cl.service("web")
	cl.pod(podSpec{name: "a", app: "web", node: n, ips: []string{"10.8.0.1"}, ready: true})
	cl.pod(podSpec{name: "b", app: "web", node: later, ips: []string{"10.8.0.2"}, ready: true})
	a := "a 10.8.0.1 r=true s=true t=false node=" + n + " zone=zone-a ports=http:8080"
	cl.waitEndpoints("web", a)

	events := client.Resource[*corev1.Event](cl.c, "events").Namespace(cl.ns)
	eventually(t, func() string {
		list, err := events.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == svc.UID && e.Reason == "FailedToUpdateEndpointSlices" && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Message, "Pod b") && e.Source.Component == eventSource {
				return ""
			}
		}
		return fmt.Sprintf("no FailedToUpdateEndpointSlices event among %d", len(list.Items))
	})

	cl.node("later", "zone-b")
	cl.waitEndpoints("web", a, "b 10.8.0.2 r=true s=true t=false node="+later+" zone=zone-b ports=http:8080")
}

func TestIntegrationTrafficDistribution(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	n := cl.node("n", "zone-a")
	cl.service("web", func(s *corev1.Service) {
		s.Spec.TrafficDistribution = new(corev1.ServiceTrafficDistributionPreferSameNode)
	})
	cl.pod(podSpec{name: "a", app: "web", node: n, ips: []string{"10.9.0.1"}, ready: true})
	cl.waitEndpoints("web", "a 10.9.0.1 r=true s=true t=false node="+n+" zone=zone-a hints=zone:zone-a,node:"+n+" ports=http:8080")

	// The Node moves to another zone: its endpoints follow.
	ctx := context.Background()
	nodes := client.Resource[*corev1.Node](cl.c, "nodes")
	node, err := nodes.Get(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	node.Labels[corev1.LabelTopologyZone] = "zone-c"
	if _, err := nodes.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	cl.waitEndpoints("web", "a 10.9.0.1 r=true s=true t=false node="+n+" zone=zone-c hints=zone:zone-c,node:"+n+" ports=http:8080")

	cur, err := cl.services().Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.TrafficDistribution = nil
	if _, err := cl.services().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	cl.waitEndpoints("web", "a 10.9.0.1 r=true s=true t=false node="+n+" zone=zone-c ports=http:8080")
}

// A pod relabelled from one Service's selector to another's moves between their slices.
func TestIntegrationPodRelabelled(t *testing.T) {
	cl := newCluster(t)
	startController(t, func(_ *controller.Context, o *Options) { o.EndpointSliceUpdatesBatchPeriod = 50 * time.Millisecond })
	n := cl.node("n", "zone-a")
	cl.service("blue")
	cl.service("green")
	cl.pod(podSpec{name: "a", app: "blue", node: n, ips: []string{"10.11.0.1"}, ready: true})
	a := "a 10.11.0.1 r=true s=true t=false node=" + n + " zone=zone-a ports=http:8080"
	cl.waitEndpoints("blue", a)
	cl.waitEndpoints("green")

	ctx := context.Background()
	p, err := cl.pods().Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["app"] = "green"
	if _, err := cl.pods().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	cl.waitEndpoints("green", a)
	cl.waitEndpoints("blue")
}

// Services the controller does not manage: ExternalName and selectorless ones get no slices.
func TestIntegrationServicesWithoutSlices(t *testing.T) {
	cl := newCluster(t)
	startController(t, nil)
	cl.service("external", func(s *corev1.Service) {
		s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}
	})
	cl.service("manual", func(s *corev1.Service) { s.Spec.Selector = nil })
	cl.service("control")
	eventually(t, func() string {
		if len(cl.slicesOf("control")) != 1 {
			return "no placeholder for the control Service"
		}
		return ""
	})
	time.Sleep(500 * time.Millisecond)
	for _, name := range []string{"external", "manual"} {
		if ss := cl.slicesOf(name); len(ss) != 0 {
			t.Errorf("%s got slices: %s", name, dump(ss))
		}
	}
}

// Once Run returns, nothing the controller started is still running.
func TestIntegrationNoGoroutineLeft(t *testing.T) {
	cl := newCluster(t)
	r := startController(t, func(_ *controller.Context, o *Options) { o.EndpointSliceUpdatesBatchPeriod = 100 * time.Millisecond })
	n := cl.node("n", "")
	cl.service("web")
	cl.pod(podSpec{name: "a", app: "web", node: n, ips: []string{"10.10.0.1"}, ready: true})
	cl.waitEndpoints("web", "a 10.10.0.1 r=true s=true t=false node="+n+" zone= ports=http:8080")
	r.stop()
	eventually(t, func() string {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, pkg := range []string{"controller", "workqueue", "cache", "client"} {
				if strings.Contains(g, "created by github.com/kplane/kplane/"+pkg+".") ||
					strings.Contains(g, "created by github.com/kplane/kplane/"+pkg+"/") {
					return "goroutine left:\n" + g
				}
			}
		}
		return ""
	})
}

// counterValue reads a counter's current value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
