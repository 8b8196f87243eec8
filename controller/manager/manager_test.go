package manager_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/spf13/pflag"
)

var (
	srv *testserver.Server
	c   *client.Client
)

func TestMain(m *testing.M) {
	testserver.Main(m, func(s *testserver.Server, cl *client.Client) { srv, c = s, cl })
}

// testOptions: a free port for health and metrics, a lease of the test's own, short durations.
func testOptions(t *testing.T) manager.Options {
	o := manager.DefaultOptions()
	o.SecurePort = freePort(t)
	o.Election.ResourceName = strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	o.Election.LeaseDuration, o.Election.RenewDeadline, o.Election.RetryPeriod = 2*time.Second, time.Second, 100*time.Millisecond
	return o
}

func freePort(t *testing.T) int {
	t.Helper()
	// Port 0 means "off" for the manager, so the test asks the kernel for a free port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startManager runs a manager until the test ends (or stop is called) and returns it.
func startManager(t *testing.T, o manager.Options) (*manager.Manager, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := manager.StartWithClient(ctx, o, c)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := m.Wait(); err != nil {
			t.Errorf("manager stopped with %v", err)
		}
	})
	return m, cancel
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metric(t *testing.T, m *manager.Manager, name string) string {
	t.Helper()
	_, body := get(t, "http://"+m.Addr+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name) {
			return line
		}
	}
	return ""
}

func TestHealthMetricsAndProfiling(t *testing.T) {
	o := testOptions(t)
	m, _ := startManager(t, o)
	eventually(t, "leadership", func() bool { return strings.HasSuffix(metric(t, m, "leader_election_master_status"), " 1") })
	code, body := get(t, "http://"+m.Addr+"/healthz?verbose")
	if code != 200 || !strings.Contains(body, "[+]leaderElection ok") {
		t.Errorf("/healthz?verbose: %d %s", code, body)
	}
	for _, name := range manager.Names() {
		if code, body := get(t, "http://"+m.Addr+"/healthz/"+name); code != 200 || body != "ok" {
			t.Errorf("/healthz/%s: %d %s", name, code, body)
		}
	}
	if code, _ := get(t, "http://"+m.Addr+"/healthz/no-such-controller"); code != 404 {
		t.Errorf("/healthz of an unknown check: %d", code)
	}
	if code, _ := get(t, "http://"+m.Addr+"/debug/pprof/"); code != 200 {
		t.Errorf("/debug/pprof/ with profiling on: %d", code)
	}
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if metric(t, m, want) == "" {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestProfilingOff(t *testing.T) {
	o := testOptions(t)
	o.Profiling, o.LeaderElect = false, false
	m, _ := startManager(t, o)
	if code, _ := get(t, "http://"+m.Addr+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ with profiling off: %d", code)
	}
}

func TestTwoReplicasOneLeads(t *testing.T) {
	o := testOptions(t)
	a, stopA := startManager(t, o)
	eventually(t, "a to lead", func() bool { return strings.HasSuffix(metric(t, a, "leader_election_master_status"), " 1") })
	o.SecurePort = freePort(t)
	b, _ := startManager(t, o)
	time.Sleep(500 * time.Millisecond)
	if got := metric(t, b, "leader_election_master_status"); !strings.HasSuffix(got, " 0") {
		t.Fatalf("the second replica leads too: %s", got)
	}
	if code, _ := get(t, "http://"+b.Addr+"/healthz"); code != 200 {
		t.Errorf("a standby replica is unhealthy: %d", code)
	}
	stopA()
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to take over", func() bool { return strings.HasSuffix(metric(t, b, "leader_election_master_status"), " 1") })
}

// TestInvalidOptions: each controller's flags reach its own settings, and the manager refuses
// to start with an invalid one, naming the flag; a disabled controller's settings are not
// checked.
func TestInvalidOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string // in the error; "" = accepted
	}{
		"unknown controller":          {[]string{"--controllers=*,nope"}, `unknown controller "nope"`},
		"unknown disabled controller": {[]string{"--controllers=-nope"}, `unknown controller "nope"`},
		"slice size 0":                {[]string{"--max-endpoints-per-slice=0"}, "--max-endpoints-per-slice"},
		"slice size 1001":             {[]string{"--max-endpoints-per-slice=1001"}, "--max-endpoints-per-slice"},
		"51 slice workers":            {[]string{"--concurrent-service-endpoint-syncs=51"}, "--concurrent-service-endpoint-syncs"},
		"no endpoint workers":         {[]string{"--concurrent-endpoint-syncs=0"}, "--concurrent-endpoint-syncs"},
		"no namespace workers":        {[]string{"--concurrent-namespace-syncs=0"}, "--concurrent-namespace-syncs"},
		"negative batch period":       {[]string{"--endpoint-updates-batch-period=-1s"}, "--endpoint-updates-batch-period"},
		"no resync":                   {[]string{"--min-resync-period=0"}, "--min-resync-period"},
		"renew deadline too long":     {[]string{"--leader-elect-renew-deadline=1m"}, "renew"},
		"port out of range":           {[]string{"--secure-port=70000"}, "--secure-port"},
		"disabled controller's":       {[]string{"--controllers=*,-namespace", "--concurrent-namespace-syncs=0", "--secure-port=0", "--leader-elect=false"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			o := manager.DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Error("accepted")
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if tc.want != "" {
				if _, err := manager.StartWithClient(context.Background(), o, c); err == nil {
					t.Error("started")
				}
			}
		})
	}
}

func TestNoAPIServer(t *testing.T) {
	o := manager.DefaultOptions()
	o.Master, o.APIServerWait, o.SecurePort = "http://127.0.0.1:1", time.Second, 0
	o.Kubeconfig = "/dev/null"
	start := time.Now()
	_, err := manager.Start(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "did not become healthy") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("gave up after %v, want about 1s", time.Since(start))
	}
}

func TestStopEndsEveryGoroutine(t *testing.T) {
	transport := &http.Transport{}
	own, err := client.New(client.Config{Host: srv.URL, QPS: -1, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	o := testOptions(t)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := manager.StartWithClient(ctx, o, own)
	if err != nil {
		t.Fatal(err)
	}
	probe := &http.Client{Transport: transport}
	eventually(t, "leadership", func() bool {
		resp, err := probe.Get("http://" + m.Addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "leader_election_master_status{name=\""+o.Election.ResourceName+"\"} 1")
	})
	cancel()
	if err := m.Wait(); err != nil {
		t.Fatal(err)
	}
	transport.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before start, %d after stop:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
