package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// benchCRD defines "apps" of group g: a spec shaped like benchPod's (image, ports, env), with
// a schema that validates each field, a status subresource and printer columns.
func benchCRD(g string) *unstructured.Unstructured {
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "apps." + g},
		"spec": map[string]any{
			"group": g, "scope": "Namespaced",
			"names": map[string]any{"plural": "apps", "singular": "app", "kind": "App"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"subresources":             map[string]any{"status": map[string]any{}},
				"additionalPrinterColumns": []any{map[string]any{"name": "Image", "type": "string", "jsonPath": ".spec.image"}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec": map[string]any{"type": "object", "required": []any{"image"}, "properties": map[string]any{
							"image": map[string]any{"type": "string", "maxLength": 200},
							"ports": map[string]any{"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": []any{"containerPort"},
								"items": map[string]any{"type": "object", "required": []any{"containerPort"}, "properties": map[string]any{
									"name": map[string]any{"type": "string"}, "containerPort": map[string]any{"type": "integer", "minimum": 1, "maximum": 65535}}}},
							"env": map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{
								"name": map[string]any{"type": "string"}, "value": map[string]any{"type": "string"}}}},
							"replicas": map[string]any{"type": "integer", "default": 1},
						}},
						"status": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
					},
				}},
			}},
		},
	}
	return &unstructured.Unstructured{Object: crd}
}

func benchApp(g, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": g + "/v1", "kind": "App",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app": "bench", "tier": "web"}},
		"spec": map[string]any{
			"image": "registry.example/app:1.0",
			"ports": []any{map[string]any{"name": "http", "containerPort": int64(8080)}},
			"env":   []any{map[string]any{"name": "MODE", "value": "bench"}},
		},
	}}
}

// crdSeq numbers the CRDs BenchmarkCRDEstablished creates, across its runs.
var crdSeq atomic.Int64

var crdGVR = apiextv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

// establish creates the CRD of group g and waits until an App can be created, returning the
// time from the CRD's create to the first App's.
func establish(b *testing.B, dyn dynamic.Interface, g, ns string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	if _, err := dyn.Resource(crdGVR).Create(ctx, benchCRD(g), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	apps := dyn.Resource(schema.GroupVersionResource{Group: g, Version: "v1", Resource: "apps"}).Namespace(ns)
	for {
		_, err := apps.Create(ctx, benchApp(g, "first"), metav1.CreateOptions{})
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			b.Fatalf("no App created within 30s of its CRD: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// jsonClient is a clientset that speaks JSON, as clients of custom resources do.
func jsonClient(b *testing.B, cfg *rest.Config) *kubernetes.Clientset {
	c := rest.CopyConfig(cfg)
	c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	c.QPS, c.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func dynamicClient(b *testing.B, cfg *rest.Config) dynamic.Interface {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	dyn, err := dynamic.NewForConfig(c)
	if err != nil {
		b.Fatal(err)
	}
	return dyn
}

// BenchmarkCRDEstablished measures the time from a CRD's create to the first custom
// resource created (the client retries every millisecond until the resource is served).
func BenchmarkCRDEstablished(b *testing.B) {
	for _, t := range targets(b) {
		b.Run(t.name, func(b *testing.B) {
			dyn := dynamicClient(b, t.cfg)
			ns := "bench-crd-" + runID
			ensureNamespace(b, t, ns)
			var all []time.Duration
			for i := 0; i < b.N; i++ {
				all = append(all, establish(b, dyn, fmt.Sprintf("e%d-%s.bench.example.com", crdSeq.Add(1), runID), ns))
			}
			report(b, all)
		})
	}
}

// BenchmarkCustomResources compares custom resources with pods on the same server: create,
// get and watch latency (16 clients), pods in protobuf (client-go's default for them) and in
// JSON (what custom resources travel as).
func BenchmarkCustomResources(b *testing.B) {
	for _, t := range targets(b) {
		dyn := dynamicClient(b, t.cfg)
		g := "cr-" + runID + ".bench.example.com"
		ns := "bench-cr-" + runID
		ensureNamespace(b, t, ns)
		var once sync.Once
		ensureCRD := func(b *testing.B) {
			once.Do(func() { establish(b, dyn, g, ns) })
		}
		pj := jsonClient(b, t.cfg)
		apps := dyn.Resource(schema.GroupVersionResource{Group: g, Version: "v1", Resource: "apps"}).Namespace(ns)
		kinds := []struct {
			name   string
			create func(name string) error
			get    func(name string) error
			watch  func(ctx context.Context) (watch.Interface, error)
			nameOf func(runtime.Object) string
		}{
			{"pods", func(n string) error {
				_, err := t.cs.CoreV1().Pods(ns).Create(context.Background(), benchPod(n), metav1.CreateOptions{})
				return err
			}, func(n string) error {
				_, err := t.cs.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
				return err
			}, func(ctx context.Context) (watch.Interface, error) {
				return t.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
			}, func(o runtime.Object) string { return o.(*corev1.Pod).Name }},
			{"pods-json", func(n string) error {
				_, err := pj.CoreV1().Pods(ns).Create(context.Background(), benchPod(n), metav1.CreateOptions{})
				return err
			}, func(n string) error {
				_, err := pj.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
				return err
			}, func(ctx context.Context) (watch.Interface, error) {
				return pj.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
			}, func(o runtime.Object) string { return o.(*corev1.Pod).Name }},
			{"custom", func(n string) error {
				_, err := apps.Create(context.Background(), benchApp(g, n), metav1.CreateOptions{})
				return err
			}, func(n string) error {
				_, err := apps.Get(context.Background(), n, metav1.GetOptions{})
				return err
			}, func(ctx context.Context) (watch.Interface, error) {
				return apps.Watch(ctx, metav1.ListOptions{})
			}, func(o runtime.Object) string { return o.(*unstructured.Unstructured).GetName() }},
		}
		for _, k := range kinds {
			b.Run(t.name+"/create/"+k.name, func(b *testing.B) {
				ensureCRD(b)
				prefix := fmt.Sprint("c-", k.name, "-", b.N, "-")
				latencies(b, b.N, func(i int) error { return k.create(prefix + strconv.Itoa(i)) })
			})
			b.Run(t.name+"/get/"+k.name, func(b *testing.B) {
				ensureCRD(b)
				target := "g-" + k.name
				_ = k.create(target)
				latencies(b, b.N, func(int) error { return k.get(target) })
			})
			b.Run(t.name+"/watch/"+k.name, func(b *testing.B) {
				ensureCRD(b)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				prefix := fmt.Sprint("w-", k.name, "-", b.N, "-")
				var started sync.Map
				lat := make(chan time.Duration, b.N*clients)
				var done sync.WaitGroup
				for c := 0; c < clients; c++ {
					w, err := k.watch(ctx)
					if err != nil {
						b.Fatal(err)
					}
					done.Add(1)
					go func() {
						defer done.Done()
						defer w.Stop()
						seen := 0
						for ev := range w.ResultChan() {
							if ev.Type != watch.Added {
								continue
							}
							if t0, ok := started.Load(k.nameOf(ev.Object)); ok {
								lat <- time.Since(t0.(time.Time))
								if seen++; seen == b.N {
									return
								}
							}
						}
					}()
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					name := prefix + strconv.Itoa(i)
					started.Store(name, time.Now())
					if err := k.create(name); err != nil {
						b.Fatal(err)
					}
				}
				done.Wait()
				b.StopTimer()
				close(lat)
				var all []time.Duration
				for d := range lat {
					all = append(all, d)
				}
				report(b, all)
			})
		}
	}
}
