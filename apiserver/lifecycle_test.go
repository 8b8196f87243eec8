package apiserver_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// start runs a private apiserver for tests that restart or reconfigure one, and a client-go
// clientset built from the kubeconfig it writes.
func start(t *testing.T, mutate func(*apiserver.Options)) (*testserver.Server, *kubernetes.Clientset) {
	t.Helper()
	srv, err := testserver.Start(mutate)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cs
}

func svcWithIP(name, ip string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}}}
}

// TestRestartKeepsState: objects and allocations survive a restart on the same data dir.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	inst, cs := start(t, func(o *apiserver.Options) { o.DataDir = dir })
	if _, err := cs.CoreV1().Services("default").Create(ctx, svcWithIP("keep", "10.96.0.50"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}
	inst, cs = start(t, func(o *apiserver.Options) { o.DataDir = dir })
	defer inst.Stop()
	if _, err := cs.CoreV1().Services("default").Get(ctx, "keep", metav1.GetOptions{}); err != nil {
		t.Fatalf("service lost across restart: %v", err)
	}
	_, err := cs.CoreV1().Services("default").Create(ctx, svcWithIP("dup", "10.96.0.50"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("ClusterIP allocated twice across a restart: %v", err)
	}
}

// TestExternalEtcd: with --etcd-servers the apiserver keeps nothing itself; a second apiserver
// on the same cluster sees the first one's objects.
func TestExternalEtcd(t *testing.T) {
	external, err := storage.StartEmbedded(storage.EmbeddedOptions{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer external.Close()
	ctx := context.Background()
	useExternal := func(o *apiserver.Options) { o.DataDir, o.EtcdServers = t.TempDir(), []string{external.Endpoint()} }
	first, cs := start(t, useExternal)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Data: map[string]string{"a": "b"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second, cs2 := start(t, useExternal)
	defer second.Stop()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	got, err := cs2.CoreV1().ConfigMaps("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil || got.Data["a"] != "b" {
		t.Fatalf("second apiserver: %v %v", got, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := storage.Connect(short, []string{"http://127.0.0.1:1"}); err == nil {
		t.Fatal("connecting to nothing succeeded")
	}
}

// TestSecureServing: off loopback the server uses TLS (self-signed into the data dir) and
// tokens; the written kubeconfig works as is, and anonymous requests get 401.
func TestSecureServing(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("s3cret,alice,1,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	inst, cs := start(t, func(o *apiserver.Options) {
		o.DataDir, o.BindAddress, o.TokenAuthFile, o.WriteKubeconfig = dir, "0.0.0.0", tokens, kubeconfig
	})
	defer inst.Stop()
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("authenticated request: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err != nil {
		t.Fatalf("no generated certificate: %v", err)
	}
	if written, err := os.ReadFile(kubeconfig); err != nil || string(written) != string(inst.Kubeconfig) {
		t.Fatalf("written kubeconfig: %v", err)
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := insecure.Get(inst.URL + "/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous request: %d", resp.StatusCode)
	}
}

// TestConcurrentServiceCreates: racing creates never share a ClusterIP.
func TestConcurrentServiceCreates(t *testing.T) {
	ns := namespace(t)
	var wg sync.WaitGroup
	ips := make(chan string, 30)
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := do(t, "POST", "/api/v1/namespaces/"+ns+"/services", map[string]any{
				"metadata": map[string]any{"name": fmt.Sprint("s", i)}, "spec": map[string]any{"ports": []any{map[string]any{"port": 80}}}})
			if r.code != 201 {
				t.Errorf("create: %d %s", r.code, r.body)
				return
			}
			ips <- get(r.object(t), "spec", "clusterIP").(string)
		}()
	}
	wg.Wait()
	close(ips)
	seen := map[string]bool{}
	for ip := range ips {
		if seen[ip] {
			t.Fatalf("ClusterIP %s allocated twice", ip)
		}
		seen[ip] = true
	}
}

// TestStopEndsEveryGoroutine: a stopped server (watch caches, compactor, listeners, embedded
// etcd) leaves nothing running.
func TestStopEndsEveryGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	inst, cs := start(t, func(o *apiserver.Options) { o.DataDir = t.TempDir() })
	w, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	cs.CoreV1().RESTClient().(*rest.RESTClient).Client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before start, %d after stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
