package cache_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The integration tests share one apiserver (started on first use, gone with the test binary).
// Its watch cache keeps a short history, so a watch that was cut during churn has to relist
// (410), as after a compaction.
var (
	serverOnce sync.Once
	server     *testserver.Server
	serverErr  error
)

func apiserverURL(t *testing.T) string {
	t.Helper()
	serverOnce.Do(func() {
		server, serverErr = testserver.Start(func(o *apiserver.Options) {
			o.Cache = storage.CacheOptions{Window: 50, BookmarkInterval: 200 * time.Millisecond}
		})
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return server.URL
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Host: url, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testNamespace(t *testing.T, c *client.Client) string {
	return testserver.Namespace(t, c, "cache-test-")
}

// runInformer runs inf until the returned stop is called (or the test ends) and waits for it
// and every extra synced func to sync. stop cancels Run and waits for it to return.
func runInformer(t *testing.T, inf *cache.Informer[*corev1.Pod], synced ...func() bool) (ctx context.Context, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	if !cache.WaitForCacheSync(ctx, append(synced, inf.HasSynced)...) {
		t.Fatal("informer did not sync")
	}
	return ctx, stop
}

// pod is one pod of a template. It asks for no service-account token volume: that volume's
// random name, mounted into every container, would make each pod's containers differ, and the
// test of shared parts wants pods alike.
func pod(name string, gen int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gen": fmt.Sprint(gen)}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

// createPods creates n pods with 16 concurrent writers.
func createPods(t *testing.T, pods *client.Typed[*corev1.Pod], n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if _, err := pods.Create(context.Background(), pod(fmt.Sprint("p-", i), 0)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// recorder is a handler that keeps the last state it was told of each object.
type recorder struct {
	mu      sync.Mutex
	state   map[string]string // name → gen label of the last add/update; deleted names absent
	initial atomic.Int64
	events  atomic.Int64
}

func newRecorder() *recorder { return &recorder{state: map[string]string{}} }

func (r *recorder) handler() cache.Handler[*corev1.Pod] {
	return cache.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod, initial bool) {
			if initial {
				r.initial.Add(1)
			}
			r.set(p.Name, p.Labels["gen"])
		},
		OnUpdate: func(_, p *corev1.Pod) { r.set(p.Name, p.Labels["gen"]) },
		OnDelete: func(p *corev1.Pod, _ bool) {
			r.mu.Lock()
			delete(r.state, p.Name)
			r.mu.Unlock()
			r.events.Add(1)
		},
	}
}

func (r *recorder) set(name, gen string) {
	r.mu.Lock()
	r.state[name] = gen
	r.mu.Unlock()
	r.events.Add(1)
}

func (r *recorder) snapshot() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.state))
	for k, v := range r.state {
		out[k] = v
	}
	return out
}

// serverState is what the server has now, name → gen label.
func serverState(t *testing.T, pods *client.Typed[*corev1.Pod]) map[string]string {
	t.Helper()
	list, err := pods.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Name] = p.Labels["gen"]
	}
	return out
}

func storeState(inf *cache.Informer[*corev1.Pod]) map[string]string {
	out := map[string]string{}
	for _, p := range inf.Lister().List(labels.Everything()) {
		out[p.Name] = p.Labels["gen"]
	}
	return out
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestInformerSyncs10kPodsAndFollowsChanges(t *testing.T) {
	c := newClient(t, apiserverURL(t))
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	const n = 10000
	createPods(t, pods, n)

	ctx, cancel := context.WithCancel(context.Background())
	factory := cache.NewFactory(c, ns)
	inf := cache.For[*corev1.Pod](factory, "pods")
	if cache.For[*corev1.Pod](factory, "pods") != inf {
		t.Fatal("the factory made a second informer for the same resource")
	}
	early := newRecorder()
	reg := inf.AddHandler(early.handler(), 0)
	factory.Start(ctx)
	defer func() { cancel(); factory.Shutdown() }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 60*time.Second)
	defer syncCancel()
	if !factory.WaitForCacheSync(syncCtx) || !cache.WaitForCacheSync(syncCtx, reg.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if got := early.initial.Load(); got != n {
		t.Fatalf("%d initial adds, want %d", got, n)
	}
	if got := len(inf.Lister().Namespace(ns).List(labels.Everything())); got != n {
		t.Fatalf("lister has %d pods, want %d", got, n)
	}

	// Changes reach the store and the handler; a handler added late first gets the state.
	if _, err := pods.Patch(ctx, "p-1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"gen":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "p-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	late := newRecorder()
	lateReg := inf.AddHandler(late.handler(), 0)
	want := serverState(t, pods)
	deadline := time.Now().Add(30 * time.Second)
	for !equal(early.snapshot(), want) || !equal(late.snapshot(), want) || !equal(storeState(inf), want) || !lateReg.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatalf("handlers or store did not converge to the server's %d pods", len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p, err := inf.Lister().Namespace(ns).Get("p-1"); err != nil || p.Labels["gen"] != "1" || p.ManagedFields != nil {
		t.Fatalf("lister get: %v %v", p, err)
	}
	// Pods of one template share their parts in the store, and each still equals the server's.
	var cached []*corev1.Pod
	for _, name := range []string{"p-1", "p-3", "p-4"} {
		p, err := inf.Lister().Namespace(ns).Get(name)
		if err != nil {
			t.Fatal(err)
		}
		server, err := pods.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		server.ManagedFields = nil
		if !apiequality.Semantic.DeepEqual(p, server) {
			t.Fatalf("cached %s differs from the server's:\n%v\n%v", name, p, server)
		}
		cached = append(cached, p)
	}
	if &cached[0].Spec.Containers[0] != &cached[1].Spec.Containers[0] || &cached[1].Spec.Containers[0] != &cached[2].Spec.Containers[0] {
		t.Error("pods of one template do not share their containers")
	}
	reg.Remove()
}

// chaosProxy forwards TCP connections to the apiserver; it can cut them all and refuse new
// ones for a while.
type chaosProxy struct {
	l       net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	refused bool
}

func newChaosProxy(t *testing.T, target string) *chaosProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosProxy{l: l}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			refused := p.refused
			p.mu.Unlock()
			if refused {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() { l.Close(); p.cut() })
	return p
}

// outage cuts every connection and refuses new ones until the returned func is called.
func (p *chaosProxy) outage() (end func()) {
	p.mu.Lock()
	p.refused = true
	p.mu.Unlock()
	p.cut()
	return func() {
		p.mu.Lock()
		p.refused = false
		p.mu.Unlock()
	}
}

func (p *chaosProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestInformerSurvivesCutsAndExpiredHistory: under steady churn, with the informer's
// connections cut at random and its history gone by the time it reconnects (410), the store
// ends equal to the server's state and the handler saw every object's final state.
func TestInformerSurvivesCutsAndExpiredHistory(t *testing.T) {
	url := apiserverURL(t)
	direct := newClient(t, url)
	ns := testNamespace(t, direct)
	pods := client.Resource[*corev1.Pod](direct, "pods").Namespace(ns)
	createPods(t, pods, 200)

	proxy := newChaosProxy(t, server.URL[len("http://"):])
	viaProxy := newClient(t, "http://"+proxy.l.Addr().String())
	inf := cache.NewInformer[*corev1.Pod]("pods", client.Resource[*corev1.Pod](viaProxy, "pods").Namespace(ns))
	rec := newRecorder()
	inf.AddHandler(rec.handler(), 0)
	ctx, _ := runInformer(t, inf)

	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 4; round++ {
		// Half the rounds: a short cut (the informer resumes its watch). The others: an outage
		// with more changes than the server's 50-event history (the informer must relist).
		end := func() {}
		if round%2 == 1 {
			end = proxy.outage()
		} else {
			proxy.cut()
		}
		for i := 0; i < 150; i++ {
			name := fmt.Sprint("p-", rng.IntN(200))
			switch rng.IntN(3) {
			case 0:
				_ = pods.Delete(ctx, name, metav1.DeleteOptions{})
			case 1:
				_, _ = pods.Create(ctx, pod(name, round))
			default:
				_, _ = pods.Patch(ctx, name, "application/merge-patch+json", []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d-%d"}}}`, round, i)), metav1.PatchOptions{})
			}
		}
		end()
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
	want := serverState(t, pods)
	deadline := time.Now().Add(60 * time.Second)
	for !equal(storeState(inf), want) || !equal(rec.snapshot(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("store (%d) or handler (%d) did not converge to the server's %d pods", len(storeState(inf)), len(rec.snapshot()), len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestInformerStopsCleanly: once Run returns, every goroutine the informer (its reflector,
// watch, resync loop and handler goroutines) started has ended.
func TestInformerStopsCleanly(t *testing.T) {
	url := apiserverURL(t)
	transport := &http.Transport{}
	c, err := client.New(client.Config{Host: url, QPS: -1, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	ns := testNamespace(t, c)
	before := runtime.NumGoroutine()
	inf := cache.NewInformer[*corev1.Pod]("pods", client.Resource[*corev1.Pod](c, "pods").Namespace(ns))
	inf.AddHandler(newRecorder().handler(), time.Second)
	_, stop := runInformer(t, inf)
	inf.AddHandler(newRecorder().handler(), 0) // a late handler's goroutine must end too
	stop()
	transport.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after Run returned:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// olderServer answers streaming-list watches the way servers without WatchList do (422), and
// passes everything else to the real server.
type olderServer struct {
	*client.Typed[*corev1.Pod]
	refused atomic.Int32
}

func (o *olderServer) Watch(ctx context.Context, opts metav1.ListOptions) (*client.Watch[*corev1.Pod], error) {
	if opts.SendInitialEvents != nil {
		o.refused.Add(1)
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "",
			field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "not supported")})
	}
	return o.Typed.Watch(ctx, opts)
}

// TestReflectorFallsBackToListWatch: against a server without streaming lists the informer
// lists and watches instead, once.
func TestReflectorFallsBackToListWatch(t *testing.T) {
	c := newClient(t, apiserverURL(t))
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	createPods(t, pods, 30)
	older := &olderServer{Typed: pods}
	inf := cache.NewInformer[*corev1.Pod]("pods", older)
	rec := newRecorder()
	inf.AddHandler(rec.handler(), 0)
	ctx, _ := runInformer(t, inf)
	if _, err := pods.Create(ctx, pod("late", 1)); err != nil {
		t.Fatal(err)
	}
	want := serverState(t, pods)
	deadline := time.Now().Add(20 * time.Second)
	for !equal(rec.snapshot(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("handler has %d pods, server %d", len(rec.snapshot()), len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := older.refused.Load(); n != 1 {
		t.Fatalf("streaming list tried %d times, want once", n)
	}
}

// TestResyncAndRemoval: a handler with a resync period is told every object again as an
// update; a handler with none is not; a removed handler hears nothing more.
func TestResyncAndRemoval(t *testing.T) {
	c := newClient(t, apiserverURL(t))
	ns := testNamespace(t, c)
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	createPods(t, pods, 3)
	inf := cache.NewInformer[*corev1.Pod]("pods", pods)
	var resynced, quiet, removed atomic.Int64
	inf.AddHandler(cache.Handler[*corev1.Pod]{OnUpdate: func(old, p *corev1.Pod) {
		if old.ResourceVersion == p.ResourceVersion {
			resynced.Add(1)
		}
	}}, 100*time.Millisecond)
	inf.AddHandler(cache.Handler[*corev1.Pod]{OnUpdate: func(_, _ *corev1.Pod) { quiet.Add(1) }}, 0)
	reg := inf.AddHandler(cache.Handler[*corev1.Pod]{OnAdd: func(*corev1.Pod, bool) { removed.Add(1) }}, 0)
	ctx, _ := runInformer(t, inf, reg.HasSynced)
	reg.Remove()
	before := removed.Load()
	if _, err := pods.Create(ctx, pod("after-removal", 0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for resynced.Load() < 6 { // two rounds of three pods
		if time.Now().After(deadline) {
			t.Fatalf("resyncs seen: %d", resynced.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if quiet.Load() != 0 {
		t.Fatalf("a handler without resync got %d updates", quiet.Load())
	}
	if removed.Load() != before {
		t.Fatalf("a removed handler was told of %d more adds", removed.Load()-before)
	}
}

// TestAllNamespacesAndStoppedInformer: Namespace("") lists every namespace; a handler added
// after Run returned is never run.
func TestAllNamespacesAndStoppedInformer(t *testing.T) {
	c := newClient(t, apiserverURL(t))
	ns := testNamespace(t, c)
	createPods(t, client.Resource[*corev1.Pod](c, "pods").Namespace(ns), 2)
	inf := cache.NewInformer[*corev1.Pod]("pods", client.Resource[*corev1.Pod](c, "pods"))
	_, stop := runInformer(t, inf)
	all, one := inf.Lister().Namespace("").List(labels.Everything()), inf.Lister().Namespace(ns).List(labels.Everything())
	if len(one) != 2 || len(all) < len(one) || len(all) != len(inf.Lister().List(labels.Everything())) {
		t.Fatalf("namespace %s: %d pods, all namespaces: %d", ns, len(one), len(all))
	}
	stop()
	var calls atomic.Int64
	reg := inf.AddHandler(cache.Handler[*corev1.Pod]{OnAdd: func(*corev1.Pod, bool) { calls.Add(1) }}, 0)
	time.Sleep(100 * time.Millisecond)
	if calls.Load() != 0 || reg.HasSynced() {
		t.Fatalf("a handler added to a stopped informer ran %d times (synced %v)", calls.Load(), reg.HasSynced())
	}
}
