package manager_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	churnServices = 12
	churnPods     = 120
)

// churn is a namespace of services and pods that changes at random.
type churn struct {
	t    *testing.T
	ns   string
	pods *client.Typed[*corev1.Pod]
	svcs *client.Typed[*corev1.Service]
	rnd  *rand.Rand
	next int
}

func newChurn(t *testing.T) *churn {
	ns := testserver.Namespace(t, c, "churn-")
	ch := &churn{t: t, ns: ns, pods: client.Resource[*corev1.Pod](c, "pods").Namespace(ns),
		svcs: client.Resource[*corev1.Service](c, "services").Namespace(ns), rnd: rand.New(rand.NewPCG(1, 2))}
	ctx := context.Background()
	if _, err := client.Resource[*corev1.Node](c, "nodes").Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "churn-node-" + ns}}); err != nil {
		t.Fatal(err)
	}
	for i := range churnServices {
		if _, err := ch.svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("svc-", i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"svc": fmt.Sprint(i)},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range churnPods {
		ch.createPod(ctx)
	}
	return ch
}

func (ch *churn) createPod(ctx context.Context) {
	i := ch.next
	ch.next++
	ip := fmt.Sprintf("10.3.%d.%d", i/250, 1+i%250)
	p, err := ch.pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("pod-", i), Labels: map[string]string{"svc": fmt.Sprint(ch.rnd.IntN(churnServices))}},
		Spec:       corev1.PodSpec{NodeName: "churn-node-" + ch.ns, Containers: []corev1.Container{{Name: "c", Image: "c"}}},
	})
	if err != nil {
		if ctx.Err() == nil {
			ch.t.Error(err)
		}
		return
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ch.readiness()}}}
	// Not ctx: a pod created when the churn stops still gets its status.
	if _, err := ch.pods.UpdateStatus(context.Background(), p); err != nil {
		ch.t.Error(err)
	}
}

func (ch *churn) readiness() corev1.ConditionStatus {
	if ch.rnd.IntN(2) == 0 {
		return corev1.ConditionFalse
	}
	return corev1.ConditionTrue
}

// step makes one random change: flip a pod's readiness, move it to another service, delete
// it, or create one.
func (ch *churn) step(ctx context.Context) {
	list, err := ch.pods.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return
	}
	p := list.Items[ch.rnd.IntN(len(list.Items))]
	switch ch.rnd.IntN(4) {
	case 0:
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ch.readiness()}}
		_, err = ch.pods.UpdateStatus(ctx, p)
	case 1:
		p.Labels["svc"] = fmt.Sprint(ch.rnd.IntN(churnServices))
		_, err = ch.pods.Update(ctx, p)
	case 2:
		err = ch.pods.Delete(ctx, p.Name, metav1.DeleteOptions{})
	default:
		ch.createPod(ctx)
	}
	if err != nil && !client.IsConflict(err) && !client.IsNotFound(err) && ctx.Err() == nil {
		ch.t.Error(err)
	}
}

// expected returns, per remaining service, its ready and not-ready pod IPs ("ready:" prefix).
// Deleted pods still terminating (bound pods have a grace period) count only in slices, as
// not ready.
func (ch *churn) expected(ctx context.Context, withTerminating bool) map[string][]string {
	pods, err := ch.pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		ch.t.Fatal(err)
	}
	svcs, err := ch.svcs.List(ctx, metav1.ListOptions{})
	if err != nil {
		ch.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range svcs.Items {
		out[s.Name] = []string{}
	}
	for _, p := range pods.Items {
		name := "svc-" + p.Labels["svc"]
		if _, ok := out[name]; !ok || len(p.Status.PodIPs) == 0 || (p.DeletionTimestamp != nil && !withTerminating) {
			continue
		}
		ready := p.Status.Conditions[0].Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		out[name] = append(out[name], fmt.Sprint(ready, ":", p.Status.PodIPs[0].IP))
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// endpointsState returns what the Endpoints say, in expected's form.
func (ch *churn) endpointsState(ctx context.Context) map[string][]string {
	list, err := client.Resource[*corev1.Endpoints](c, "endpoints").Namespace(ch.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		ch.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, ep := range list.Items {
		ips := []string{}
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				ips = append(ips, "true:"+a.IP)
			}
			for _, a := range s.NotReadyAddresses {
				ips = append(ips, "false:"+a.IP)
			}
		}
		slices.Sort(ips)
		out[ep.Name] = ips
	}
	return out
}

// slicesState returns what the EndpointSlices say, for the services in want.
func (ch *churn) slicesState(ctx context.Context, want map[string][]string) map[string][]string {
	list, err := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(ch.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		ch.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if _, ok := want[svc]; !ok {
			continue // the slices of deleted services wait for the garbage collector
		}
		if out[svc] == nil {
			out[svc] = []string{}
		}
		for _, e := range s.Endpoints {
			out[svc] = append(out[svc], fmt.Sprint(e.Conditions.Ready != nil && *e.Conditions.Ready, ":", e.Addresses[0]))
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// TestRestartMidChurn: the manager is stopped while services and pods change, more changes
// (deleted services among them) happen while it is down, and a new manager converges to the
// same Endpoints and EndpointSlices as if it had never stopped.
func TestRestartMidChurn(t *testing.T) {
	ch := newChurn(t)
	o := testOptions(t)
	o.LeaderElect, o.SecurePort = false, 0
	ctx := context.Background()

	run, stop := context.WithCancel(ctx)
	first, err := manager.StartWithClient(run, o, c)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	churning, stopChurn := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for churning.Err() == nil {
			ch.step(churning)
		}
	}()
	time.Sleep(time.Second)
	stop()
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"svc-0", "svc-1"} {
		if err := ch.svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	stopChurn()
	wg.Wait()

	second, cancel := startManager(t, o)
	_ = second
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for {
		want, wantSlices := ch.expected(ctx, false), ch.expected(ctx, true)
		gotEP, gotSlices := ch.endpointsState(ctx), ch.slicesState(ctx, want)
		epOK := maps.EqualFunc(want, gotEP, slices.Equal)
		slicesOK := !hasSlices() || maps.EqualFunc(wantSlices, gotSlices, slices.Equal)
		if epOK && slicesOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged after restart:\nwant      %v\nendpoints %v\nwant slices %v\nslices    %v", want, gotEP, wantSlices, gotSlices)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hasSlices reports whether the EndpointSlice controller is registered.
func hasSlices() bool { return slices.Contains(manager.Names(), "endpointslice") }
