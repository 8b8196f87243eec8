package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	clientgocache "k8s.io/client-go/tools/cache"
)

// informerPods is how many pods the informer benchmarks sync.
const informerPods = 50000

// peakHeap samples the heap in use until stop is closed and returns the largest sample in MB.
func peakHeap(stop <-chan struct{}) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- float64(peak) / (1 << 20)
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// informerUnderTest starts one kind of informer on ns, counting the events its handler gets,
// and returns a func that reports whether it has synced.
type informerUnderTest func(ctx context.Context, t *target, ns string, events *atomic.Int64) (synced func() bool)

var informerKinds = map[string]informerUnderTest{
	"kplane": func(ctx context.Context, t *target, ns string, events *atomic.Int64) func() bool {
		transport, err := rest.TransportFor(t.cfg)
		if err != nil {
			panic(err)
		}
		c, err := client.New(client.Config{Host: t.cfg.Host, QPS: -1, Transport: transport})
		if err != nil {
			panic(err)
		}
		inf := cache.NewInformer[*corev1.Pod]("pods", client.Resource[*corev1.Pod](c, "pods").Namespace(ns))
		count := func() { events.Add(1) }
		inf.AddHandler(cache.Handler[*corev1.Pod]{
			OnAdd:    func(*corev1.Pod, bool) { count() },
			OnUpdate: func(_, _ *corev1.Pod) { count() },
			OnDelete: func(*corev1.Pod, bool) { count() },
		}, 0)
		go inf.Run(ctx)
		return inf.HasSynced
	},
	"client-go": func(ctx context.Context, t *target, ns string, events *atomic.Int64) func() bool {
		factory := informers.NewSharedInformerFactoryWithOptions(t.cs, 0, informers.WithNamespace(ns))
		inf := factory.Core().V1().Pods().Informer()
		count := func() { events.Add(1) }
		_, _ = inf.AddEventHandler(clientgocache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { count() },
			UpdateFunc: func(_, _ any) { count() },
			DeleteFunc: func(any) { count() },
		})
		factory.Start(ctx.Done())
		return inf.HasSynced
	},
}

// BenchmarkInformerSync: the time and peak heap of an informer's initial sync of 50k pods, for
// ours and client-go's, on the same server and objects (kplane's, and the reference's when
// KPLANE_REFERENCE_KUBECONFIG is set). The sync streams every pod through the
// whole path (watch decoding, DeltaFIFO, indexer, handler), so pods per second of sync is the
// informer's event throughput.
func BenchmarkInformerSync(b *testing.B) {
	for _, t := range targets(b) {
		ns := "bench-informer"
		fill(b, t, ns, informerPods)
		for _, name := range []string{"kplane", "client-go"} {
			b.Run(t.name+"-server/"+name+"-informer", func(b *testing.B) { measureSync(b, t, ns, name) })
		}
	}
}

// measureSync runs b.N initial syncs of ns's pods by the named informer and reports the mean
// time, the throughput and the largest peak heap.
func measureSync(b *testing.B, t *target, ns, name string) {
	var total time.Duration
	var heap float64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		ctx, cancel := context.WithCancel(context.Background())
		var events atomic.Int64
		stop := make(chan struct{})
		peak := peakHeap(stop)
		start := time.Now()
		synced := informerKinds[name](ctx, t, ns, &events)
		for !synced() || events.Load() < informerPods {
			time.Sleep(time.Millisecond)
		}
		total += time.Since(start)
		close(stop)
		heap = max(heap, <-peak)
		cancel()
		time.Sleep(100 * time.Millisecond) // let the informer's goroutines wind down
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-sync")
	b.ReportMetric(float64(informerPods)*float64(b.N)/total.Seconds(), "events/s")
	b.ReportMetric(heap, "peak-heap-MB")
}

// recordWatchList captures, byte for byte, the protobuf stream a server sends for a streaming
// initial list of ns's pods (up to and including the bookmark that ends it).
func recordWatchList(b *testing.B, t *target, ns string) []byte {
	hc, err := rest.HTTPClientFor(t.cfg)
	if err != nil {
		b.Fatal(err)
	}
	url := t.cfg.Host + "/api/v1/namespaces/" + ns + "/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2"
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body) // the server ends the watch after timeoutSeconds
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkInformerReplay isolates the informers from the server: a recorded streaming list of
// 50k pods is replayed from memory to each, so the figure is the client side alone (decoding,
// queue, store, handler).
func BenchmarkInformerReplay(b *testing.B) {
	t := targets(b)[0]
	ns := "bench-informer"
	fill(b, t, ns, informerPods)
	stream := recordWatchList(b, t, ns)
	replay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "" || r.URL.Query().Get("sendInitialEvents") != "true" {
			http.Error(w, "replay serves only the recorded streaming list", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		_, _ = w.Write(stream)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer replay.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: replay.URL, QPS: -1})
	if err != nil {
		b.Fatal(err)
	}
	rt := &target{name: "replay", cs: cs, cfg: &rest.Config{Host: replay.URL, QPS: -1}}
	for _, name := range []string{"kplane", "client-go"} {
		b.Run(name, func(b *testing.B) { measureSync(b, rt, ns, name) })
	}
}
