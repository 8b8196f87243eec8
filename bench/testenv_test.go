package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/testenv"
)

// startStops is how many Starts each variant of BenchmarkTestenvStart times.
const startStops = 40

// BenchmarkTestenvStart times testenv.Start until it returns (apiserver ready, controllers
// started, CRDs Established and in discovery), one instance at a time, stopping each before
// the next: the cost each test pays. p50/p99 over startStops starts per variant.
func BenchmarkTestenvStart(b *testing.B) {
	for _, v := range []struct {
		name string
		opts []testenv.Option
	}{
		{"bare", []testenv.Option{testenv.WithoutControllers()}},
		{"default-controllers", nil},
		{"default-controllers+2-CRDs", []testenv.Option{testenv.WithCRDs("../testenv/testdata/crds")}},
	} {
		b.Run(v.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, startStops*b.N)
			for range b.N * startStops {
				t0 := time.Now()
				env := testenv.Start(b, v.opts...)
				lat = append(lat, time.Since(t0))
				if err := env.Stop(); err != nil {
					b.Fatal(err)
				}
			}
			report(b, lat)
		})
	}
}

// BenchmarkTestenvParallel starts 20 instances at once (default controllers), each in its own
// goroutine, and reports each Start's time to ready (p50, and p99, which of 20 is the second
// slowest), the time until all are ready, the process's RSS with the 20 running (the whole
// test binary: the figure to compare with 2 GB), and the Go heap in use per instance (after a
// GC, less the heap before they started).
func BenchmarkTestenvParallel(b *testing.B) {
	const n = 20
	var lat []time.Duration
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		rssBefore := rssMB(os.Getpid())
		t0 := time.Now()
		envs := make([]*testenv.Env, n)
		took := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range envs {
			wg.Go(func() {
				start := time.Now()
				envs[i] = testenv.Start(b)
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		all := time.Since(t0)
		lat = append(lat, took...)
		time.Sleep(time.Second) // idle, as BenchmarkStartup measures
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		rss := rssMB(os.Getpid())
		for _, env := range envs {
			if err := env.Stop(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(all.Milliseconds()), "ms-all-ready")
		b.ReportMetric(rss, "RSS-MB-with-20")
		b.ReportMetric((rss-rssBefore)/n, "RSS-MB-per-instance")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n/(1<<20), "heap-MB-per-instance")
	}
	report(b, lat)
}

// BenchmarkEnvtestReference starts the reference etcd and kube-apiserver the way envtest does
// (fresh data dir and free ports each time, its flags, readiness by polling /readyz) and stops
// them, reporting the time to ready and the RSS of both processes once ready. It needs the
// binaries of ../shared/reference/build.sh (KPLANE_REFERENCE_BIN, default
// /tmp/k8s-reference/bin), and skips without them.
func BenchmarkEnvtestReference(b *testing.B) {
	bin := referenceBin(b)
	const runs = 5
	var lat []time.Duration
	var rss float64
	for range b.N * runs {
		ref, err := startReference(b.TempDir(), bin, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		ref.stop()
		lat = append(lat, ref.took)
		rss = ref.rss
	}
	report(b, lat)
	b.ReportMetric(rss, "RSS-MB-apiserver+etcd")
}

// BenchmarkEnvtestReferenceParallel is BenchmarkTestenvParallel for the reference: 20 etcd +
// kube-apiserver pairs started at once the envtest way; it reports how many were ready within
// five minutes, each one's time to ready (p50, p99), the time until the last was, and the RSS
// of all of them while running.
func BenchmarkEnvtestReferenceParallel(b *testing.B) {
	bin := referenceBin(b)
	const n = 20
	var lat []time.Duration
	for range b.N {
		t0 := time.Now()
		refs, errs := make([]reference, n), make([]error, n)
		dirs := make([]string, n)
		for i := range dirs {
			dirs[i] = b.TempDir()
		}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { refs[i], errs[i] = startReference(dirs[i], bin, 5*time.Minute) })
		}
		wg.Wait()
		all := time.Since(t0)
		time.Sleep(time.Second) // idle, as BenchmarkTestenvParallel measures
		total, ready := 0.0, 0
		for i := range n {
			if errs[i] != nil {
				b.Logf("instance %d: %v", i, errs[i])
				continue
			}
			ready++
			total += refs[i].rss
			lat = append(lat, refs[i].took)
			refs[i].stop()
		}
		b.ReportMetric(float64(ready), "ready")
		b.ReportMetric(float64(all.Milliseconds()), "ms-all-ready")
		b.ReportMetric(total, "RSS-MB-of-ready")
	}
	if len(lat) > 0 {
		report(b, lat)
	}
}

func referenceBin(b *testing.B) string {
	bin := os.Getenv("KPLANE_REFERENCE_BIN")
	if bin == "" {
		bin = "/tmp/k8s-reference/bin"
	}
	if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
		b.Skip("no reference binaries:", err)
	}
	return bin
}

// reference is a running reference etcd and kube-apiserver: how long it took to be ready, the
// RSS of both processes then, and how to stop them.
type reference struct {
	took time.Duration
	rss  float64
	stop func()
}

// startReference starts the reference etcd and kube-apiserver with their data in dir and
// returns once /readyz answers 200, or an error (with the end of kube-apiserver's log) when it
// does not within the given time; nothing is left running then.
func startReference(dir, bin string, within time.Duration) (reference, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return reference{}, err
	}
	der, _ := x509.MarshalECPrivateKey(key)
	pub, _ := x509.MarshalPKIXPublicKey(key.Public())
	if err := errors.Join(
		os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600),
		os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600),
		os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte("reftoken,admin,admin,system:masters\n"), 0o600)); err != nil {
		return reference{}, err
	}
	// Three free ports, each held until all are chosen so that they differ.
	var ports []int
	var held []net.Listener
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return reference{}, err
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range held {
		l.Close()
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	t0 := time.Now()
	etcd := exec.Command(filepath.Join(bin, "etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--unsafe-no-fsync", "--log-level", "error")
	api := exec.Command(filepath.Join(bin, "kube-apiserver"), "--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprint("--secure-port=", apiPort), "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"), "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true", "--disable-admission-plugins=ServiceAccount", "--v=0")
	logPath := filepath.Join(dir, "kube-apiserver.log")
	if log, err := os.Create(logPath); err == nil {
		api.Stdout, api.Stderr = log, log
		defer log.Close()
	}
	var started []*exec.Cmd
	stop := func() {
		for _, c := range slices.Backward(started) {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for _, c := range []*exec.Cmd{etcd, api} {
		if err := c.Start(); err != nil {
			stop()
			return reference{}, err
		}
		started = append(started, c)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/readyz", apiPort), nil)
		req.Header.Set("Authorization", "Bearer reftoken")
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(t0) > within {
			stop()
			out, _ := os.ReadFile(logPath)
			return reference{}, fmt.Errorf("not ready within %v; kube-apiserver's log ends:\n%s", within, out[max(0, len(out)-2000):])
		}
		time.Sleep(10 * time.Millisecond)
	}
	return reference{took: time.Since(t0), rss: rssMB(api.Process.Pid) + rssMB(etcd.Process.Pid), stop: stop}, nil
}
