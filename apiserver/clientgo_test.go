package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// watchListGate switches client-go's WatchListClient feature (streaming initial lists).
type watchListGate bool

func (g watchListGate) Enabled(f features.Feature) bool {
	if f == features.WatchListClient {
		return bool(g)
	}
	return false
}

type recorded struct{ verb, kind, name string }

// TestClientGoInformers runs client-go v0.36 informers against the server, with the streaming
// initial list (the default) and with list+watch, and checks they sync and see changes in order.
func TestClientGoInformers(t *testing.T) {
	for _, watchList := range []bool{true, false} {
		t.Run(fmt.Sprintf("WatchList=%v", watchList), func(t *testing.T) {
			features.ReplaceFeatureGates(watchListGate(watchList))
			ns := namespace(t)
			cs, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL, QPS: 100, Burst: 200})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// An object that exists before the informers start arrives as an initial add.
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, newPod("early"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			events := make(chan recorded, 100)
			handler := func(kind string) cache.ResourceEventHandler {
				name := func(obj any) string {
					if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
						obj = d.Obj
					}
					return obj.(metav1.Object).GetName()
				}
				return cache.ResourceEventHandlerFuncs{
					AddFunc:    func(obj any) { events <- recorded{"add", kind, name(obj)} },
					UpdateFunc: func(_, obj any) { events <- recorded{"update", kind, name(obj)} },
					DeleteFunc: func(obj any) { events <- recorded{"delete", kind, name(obj)} },
				}
			}
			factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
			for kind, inf := range map[string]cache.SharedIndexInformer{
				"pod":           factory.Core().V1().Pods().Informer(),
				"service":       factory.Core().V1().Services().Informer(),
				"endpoints":     factory.Core().V1().Endpoints().Informer(),
				"endpointslice": factory.Discovery().V1().EndpointSlices().Informer(),
			} {
				if _, err := inf.AddEventHandler(handler(kind)); err != nil {
					t.Fatal(err)
				}
			}
			factory.Start(ctx.Done())
			syncCtx, syncCancel := context.WithTimeout(ctx, 15*time.Second)
			defer syncCancel()
			for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
				if !ok {
					t.Fatalf("informer for %v did not sync", typ)
				}
			}
			expect(t, events, recorded{"add", "pod", "early"})

			// Typed writes send protobuf bodies.
			pods := cs.CoreV1().Pods(ns)
			p, err := pods.Create(ctx, newPod("web"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Labels["version"] = "2"
			if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
				t.Fatalf("stale update: %v, want a conflict", err)
			}
			if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
			if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
			if _, err := cs.CoreV1().Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.3"}}}}
			if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			expect(t, events,
				recorded{"add", "pod", "web"}, recorded{"update", "pod", "web"}, recorded{"delete", "pod", "web"},
				recorded{"add", "service", "web"}, recorded{"add", "endpoints", "web"}, recorded{"add", "endpointslice", "web-1"})
		})
	}
}

func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

// expect reads events until it has seen want; events of one kind must come in want's order,
// while informers of different kinds may interleave freely.
func expect(t *testing.T, events <-chan recorded, want ...recorded) {
	t.Helper()
	pending := map[string][]recorded{}
	for _, w := range want {
		pending[w.kind] = append(pending[w.kind], w)
	}
	deadline := time.After(15 * time.Second)
	for left := len(want); left > 0; left-- {
		select {
		case got := <-events:
			queue := pending[got.kind]
			if len(queue) == 0 || queue[0] != got {
				t.Fatalf("got %v, want the next %s event to be %v", got, got.kind, queue)
			}
			pending[got.kind] = queue[1:]
		case <-deadline:
			t.Fatalf("timed out; still waiting for %v", pending)
		}
	}
}
