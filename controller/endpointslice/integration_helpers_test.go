package endpointslice

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// cluster is one integration test's view of the shared apiserver: a client and a namespace of
// its own. Its Services are deleted when the test ends, so that later tests' controllers leave
// them alone.
type cluster struct {
	t  *testing.T
	c  *client.Client
	ns string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := client.New(client.Config{Host: testServerURL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{t: t, c: c, ns: testserver.Namespace(t, c, "eps-")}
	t.Cleanup(func() {
		ctx := context.Background()
		list, err := cl.services().List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, s := range list.Items {
			_ = cl.services().Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	})
	return cl
}

func (cl *cluster) services() *client.Typed[*corev1.Service] {
	return client.Resource[*corev1.Service](cl.c, "services").Namespace(cl.ns)
}

func (cl *cluster) pods() *client.Typed[*corev1.Pod] {
	return client.Resource[*corev1.Pod](cl.c, "pods").Namespace(cl.ns)
}

func (cl *cluster) slices() *client.Typed[*discoveryv1.EndpointSlice] {
	return client.Resource[*discoveryv1.EndpointSlice](cl.c, "endpointslices").Namespace(cl.ns)
}

// running is a controller started by startController.
type running struct {
	ctl  *Controller
	stop func()
}

// startController runs an EndpointSlice controller, with its own informers, until the returned
// stop is called (at the latest when the test ends); stop returns once everything it started has
// ended. It runs 2 workers; tune, when not nil, changes the settings (the Context's shared ones,
// the controller's Options) before the controller is built.
func startController(t *testing.T, tune func(*controller.Context, *Options)) *running {
	t.Helper()
	c, err := client.New(client.Config{Host: testServerURL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	cctx, err := controller.NewContext(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.ConcurrentServiceEndpointSyncs = 2
	if tune != nil {
		tune(cctx, o)
	}
	ctl, err := New(cctx, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { cctx.Recorder.Run(ctx) })
	cctx.Informers.Start(ctx)
	wg.Go(func() {
		if err := ctl.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			cctx.Informers.Shutdown()
		})
	}
	t.Cleanup(stop)
	return &running{ctl: ctl, stop: stop}
}

// node creates a Node named after the namespace, in zone (none if empty).
func (cl *cluster) node(name, zone string) string {
	cl.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cl.ns + "-" + name, Labels: map[string]string{}}}
	if zone != "" {
		n.Labels[corev1.LabelTopologyZone] = zone
	}
	nodes := client.Resource[*corev1.Node](cl.c, "nodes")
	if _, err := nodes.Create(context.Background(), n); err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() { _ = nodes.Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	return n.Name
}

// service creates a Service named name selecting app=name, port http 80 → 8080.
func (cl *cluster) service(name string, mods ...func(*corev1.Service)) *corev1.Service {
	cl.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "a"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	created, err := cl.services().Create(context.Background(), s)
	if err != nil {
		cl.t.Fatal(err)
	}
	return created
}

// podSpec describes a pod for cluster.pod.
type podSpec struct {
	name, app, node string
	ips             []string
	ready           bool
	phase           corev1.PodPhase // default Running
	mods            []func(*corev1.Pod)
}

// pod creates a pod and sets its status the way a node agent would.
func (cl *cluster) pod(ps podSpec) *corev1.Pod {
	cl.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ps.name, Labels: map[string]string{"app": ps.app}},
		Spec:       corev1.PodSpec{NodeName: ps.node, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	for _, m := range ps.mods {
		m(p)
	}
	ctx := context.Background()
	created, err := cl.pods().Create(ctx, p)
	if err != nil {
		cl.t.Fatal(err)
	}
	created.Status = podStatus(ps)
	updated, err := cl.pods().UpdateStatus(ctx, created)
	if err != nil {
		cl.t.Fatal(err)
	}
	return updated
}

func podStatus(ps podSpec) corev1.PodStatus {
	st := corev1.PodStatus{Phase: ps.phase}
	if st.Phase == "" {
		st.Phase = corev1.PodRunning
	}
	if len(ps.ips) > 0 {
		st.PodIP = ps.ips[0]
	}
	for _, ip := range ps.ips {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	ready := corev1.ConditionFalse
	if ps.ready {
		ready = corev1.ConditionTrue
	}
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.Now()}}
	return st
}

// setReady flips a pod's Ready condition.
func (cl *cluster) setReady(name string, ready bool) {
	cl.t.Helper()
	ctx := context.Background()
	p, err := cl.pods().Get(ctx, name)
	if err != nil {
		cl.t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	if ready {
		p.Status.Conditions[0].Status = corev1.ConditionTrue
	}
	if _, err := cl.pods().UpdateStatus(ctx, p); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *cluster) deletePod(name string, grace int64) {
	cl.t.Helper()
	if err := cl.pods().Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		cl.t.Fatal(err)
	}
}

// slicesOf lists the Service's slices managed by the controller, by name.
func (cl *cluster) slicesOf(svc string) []*discoveryv1.EndpointSlice {
	cl.t.Helper()
	sel := labels.Set{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: ControllerName}.String()
	list, err := cl.slices().List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		cl.t.Fatal(err)
	}
	out := list.Items
	slices.SortFunc(out, byName)
	return out
}

// describeEndpoints renders every endpoint of the slices, sorted, for order-insensitive
// comparisons: "pod addresses r=ready s=serving t=terminating node zone [host] [hints] ports".
func describeEndpoints(ss []*discoveryv1.EndpointSlice) []string {
	out := []string{}
	for _, s := range ss {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d", deref(p.Name), deref(p.Port)))
		}
		slices.Sort(ports)
		for _, e := range s.Endpoints {
			name := "?"
			if e.TargetRef != nil {
				name = e.TargetRef.Name
			}
			d := fmt.Sprintf("%s %s r=%v s=%v t=%v node=%s zone=%s", name, strings.Join(e.Addresses, ","),
				deref(e.Conditions.Ready), deref(e.Conditions.Serving), deref(e.Conditions.Terminating), deref(e.NodeName), deref(e.Zone))
			if e.Hostname != nil {
				d += " host=" + *e.Hostname
			}
			if e.Hints != nil {
				var h []string
				for _, z := range e.Hints.ForZones {
					h = append(h, "zone:"+z.Name)
				}
				for _, n := range e.Hints.ForNodes {
					h = append(h, "node:"+n.Name)
				}
				d += " hints=" + strings.Join(h, ",")
			}
			d += " ports=" + strings.Join(ports, ",")
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// eventually polls cond until it returns "" (success) or 10 s have passed, then fails with the
// last message.
func eventually(t *testing.T, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEndpoints waits until the Service's slices hold exactly want (see describeEndpoints).
func (cl *cluster) waitEndpoints(svc string, want ...string) []*discoveryv1.EndpointSlice {
	cl.t.Helper()
	slices.Sort(want)
	if want == nil {
		want = []string{}
	}
	var got []*discoveryv1.EndpointSlice
	eventually(cl.t, func() string {
		got = cl.slicesOf(svc)
		if d := describeEndpoints(got); !slices.Equal(d, want) {
			return fmt.Sprintf("endpoints of %s:\n got  %q\n want %q", svc, d, want)
		}
		return ""
	})
	return got
}

// resourceVersions maps the Service's slices to their resourceVersions.
func (cl *cluster) resourceVersions(svc string) map[string]string {
	out := map[string]string{}
	for _, s := range cl.slicesOf(svc) {
		out[s.Name] = s.ResourceVersion
	}
	return out
}
