//go:build linux

// Package reference holds differential tests: kplane's components and the real Kubernetes ones
// are run, one after the other, against the same kplane apiserver holding the same objects, and
// what they write is compared. Where they differ by design, the difference is tolerated with its
// reason (logged); any other difference fails the test.
//
// The scenarios, one test each:
//
//   - TestControllersMatchReference: the endpoint and endpointslice controllers on one varied
//     fixture of Services and pods (this file).
//   - TestJobsMatchReference: the job controller on Jobs of every completion and failure
//     kind (jobs_test.go).
//   - TestDaemonSetsMatchReference: the daemonset controller over three Nodes (tainted,
//     labelled, cordoned): placement, rolling updates with maxUnavailable and maxSurge,
//     OnDelete, a node tainted (daemonsets_test.go).
//   - TestStatefulSetsMatchReference: the statefulset controller: OrderedReady and Parallel with
//     claim templates and retention policies, scale-down, a partitioned rolling update, OnDelete
//     (statefulsets_test.go).
//   - TestResourceQuotasMatchReference: the resourcequota controller's status.hard and
//     status.used for counts, compute resources and scopes (resourcequotas_test.go).
//   - TestDisruptionMatchesReference: the disruption controller's PodDisruptionBudget status
//     over pods of ReplicaSets, unmanaged pods and a missing controller (disruption_test.go).
//
// All but the first follow the script of scenario_test.go: each controller manager runs alone,
// with only the controller under test, on its own namespace ("<prefix>-reference", then
// "<prefix>-kplane"), the test creating the objects and playing the node (and where needed
// the scheduler) by the same rules, step by step; after each step, once at rest, the outcomes
// (normalised: no UIDs, times, random names or hashes) must be equal.
//
// The tests need the reference binaries, which CI does not have: each test is skipped unless its
// environment variable names one (KPLANE_REFERENCE_KCM: a kube-controller-manager v1.36). Run
// them by hand:
//
//	KPLANE_REFERENCE_KCM=/path/to/kube-controller-manager go test -count=1 -v -run Reference ./test/reference/
//
// With KPLANE_REFERENCE_SHOW set they also log the reference's outcomes and keep the processes'
// logs. kplane's apiserver does not serve resource.k8s.io: the reference's resourcequota
// controller logs failed watches of ResourceClaims and DeviceClasses (its evaluator for device
// quotas) and works on without them.
//
// They are Linux-only because every process started here gets a parent-death signal, so that
// nothing outlives the test binary, even when `go test -timeout` kills it.
package reference

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	// testNS is the namespace of the whole fixture.
	testNS = "ref"
	// stableFor is how long the written state must stay unchanged to count as converged.
	stableFor = 3 * time.Second
	// convergeTimeout bounds one controller manager's run.
	convergeTimeout = 3 * time.Minute

	managedByEndpoints = "endpoint-controller"
	managedBySlices    = "endpointslice-controller.k8s.io"
	labelEndpointsBy   = "endpoints.kubernetes.io/managed-by"
)

// TestControllersMatchReference runs the reference kube-controller-manager and then kplane's
// controller manager (both with only the endpoint and endpointslice controllers) on one varied
// fixture and requires the Endpoints and EndpointSlices they converge to to be the same, up to
// the normalisation described at snapshot and compare.
func TestControllersMatchReference(t *testing.T) {
	e := newEnv(t)
	fx := createFixture(t, e.c)
	ref := runUntilConverged(t, e.c, fx, e.logDir, "reference", e.referenceCommand("endpoint,endpointslice"))
	clearControllerOutput(t, e.c)
	got := runUntilConverged(t, e.c, fx, e.logDir, "kplane", e.kplaneCommand("endpoint,endpointslice"))

	diffs, tolerated := compare(ref, got)
	for _, d := range tolerated {
		t.Logf("tolerated difference: %s", d)
	}
	if len(diffs) > 0 {
		t.Errorf("kplane's controllers differ from the reference in %d ways (- reference, + kplane):\n%s",
			len(diffs), strings.Join(diffs, "\n"))
	}
}

// ---------------------------------------------------------------------------------------------
// Processes

// env is what each test runs in: a kplane apiserver and the two controller managers' binaries.
type env struct {
	refKCM, bin, logDir, kubeconfig string
	c                               *client.Client
}

// newEnv builds kplane and starts its apiserver; the test is skipped without a reference
// kube-controller-manager.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{refKCM: referenceKCM(t), bin: buildKplane(t), logDir: keptLogDir(t)}
	e.kubeconfig = startAPIServer(t, e.bin, e.logDir)
	var err error
	if e.c, err = client.FromKubeconfig(e.kubeconfig, -1, 0); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) args(controllers string) []string {
	return []string{"--kubeconfig", e.kubeconfig, "--controllers", controllers, "--leader-elect=false", "--secure-port", "0"}
}

// referenceCommand runs the reference controller manager with only the controllers named.
func (e *env) referenceCommand(controllers string) *exec.Cmd {
	return exec.Command(e.refKCM, append(e.args(controllers), "--v", "2")...)
}

// kplaneCommand runs kplane's controller manager with only the controllers named.
func (e *env) kplaneCommand(controllers string) *exec.Cmd {
	return exec.Command(e.bin, append([]string{"controller-manager"}, e.args(controllers)...)...)
}

// referenceKCM is the reference kube-controller-manager KPLANE_REFERENCE_KCM names; the test is
// skipped without one.
func referenceKCM(t *testing.T) string {
	t.Helper()
	refKCM := os.Getenv("KPLANE_REFERENCE_KCM")
	if refKCM == "" {
		t.Skip("KPLANE_REFERENCE_KCM does not name a reference kube-controller-manager binary; this differential test needs one")
	}
	if _, err := os.Stat(refKCM); err != nil {
		t.Fatalf("KPLANE_REFERENCE_KCM: %v", err)
	}
	return refKCM
}

func buildKplane(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kplane")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/kplane/kplane/cmd/kplane").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// keptLogDir returns a directory for the processes' logs that survives a failed test, or any
// with KPLANE_REFERENCE_SHOW set (and is removed after a passing one otherwise).
func keptLogDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kplane-reference-logs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("KPLANE_REFERENCE_SHOW") != "" {
			t.Logf("logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// startAPIServer starts `kplane apiserver` on a free port and a fresh data dir, waits until it
// answers /healthz and returns the kubeconfig it wrote. The process is stopped at cleanup.
func startAPIServer(t *testing.T, bin, logDir string) string {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	logs, err := os.Create(filepath.Join(logDir, "apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "apiserver", "--secure-port", "0", "--data-dir", filepath.Join(dir, "data"),
		"--write-kubeconfig", kubeconfig)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd); logs.Close() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := client.FromKubeconfig(kubeconfig, -1, 0); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = c.Healthz(ctx)
			cancel()
			if err == nil {
				return kubeconfig
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kplane apiserver not healthy after 60s; log: %s", tail(logs.Name()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopProcess asks a process to stop and kills it if it has not within 10 s.
func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// tail returns the end of a log file, for failure messages.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return path + ":\n" + string(data)
}

// runUntilConverged starts a controller manager, waits until every service the fixture expects
// output for has its Endpoints and slices and nothing has changed for stableFor, then stops it
// and returns the snapshot.
func runUntilConverged(t *testing.T, c *client.Client, fx *fixture, logDir, name string, cmd *exec.Cmd) *snapshot {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	logs, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopProcess(cmd)

	var last string
	var lastChange time.Time
	for {
		time.Sleep(500 * time.Millisecond)
		s := takeSnapshot(t, c)
		if r := s.render(); r != last {
			last, lastChange = r, time.Now()
		}
		missing := fx.missingOutput(s)
		if len(missing) == 0 && time.Since(lastChange) >= stableFor {
			t.Logf("%s: converged in %v (log: %s)", name, lastChange.Sub(start).Round(100*time.Millisecond), logPath)
			pretty, _ := json.MarshalIndent(s, "", "  ")
			if err := os.WriteFile(filepath.Join(logDir, name+".snapshot.json"), pretty, 0o644); err != nil {
				t.Fatal(err)
			}
			return s
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("%s did not converge in %v; still missing: %v\n%s", name, convergeTimeout, missing, tail(logPath))
		}
	}
}

// clearControllerOutput deletes every Endpoints and EndpointSlice object the controllers wrote
// (found by their managed-by labels), leaving the hand-written ones, and checks they are gone.
func clearControllerOutput(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := context.Background()
	eps := client.Resource[*corev1.Endpoints](c, "endpoints").Namespace(testNS)
	sls := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(testNS)
	epList, err := eps.List(ctx, metav1.ListOptions{LabelSelector: labelEndpointsBy + "=" + managedByEndpoints})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range epList.Items {
		if err := eps.Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	slList, err := sls.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + managedBySlices})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slList.Items {
		if err := sls.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	left := takeSnapshot(t, c)
	for name, e := range left.Endpoints {
		if name != "manual" {
			t.Fatalf("Endpoints %s (labels %s) survived the clean-up", name, e.Labels)
		}
	}
	for key := range left.Slices {
		if !strings.HasPrefix(key, "manual ") {
			t.Fatalf("EndpointSlices %s survived the clean-up", key)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Fixture

// fixture is what createFixture made: which services should get Endpoints and slices.
type fixture struct {
	wantEndpoints []string // services whose Endpoints object both controller managers must write
	wantSlices    []string // services that must get at least one slice
}

// missingOutput lists the expected objects a snapshot does not hold yet.
func (fx *fixture) missingOutput(s *snapshot) []string {
	var out []string
	for _, name := range fx.wantEndpoints {
		if _, ok := s.Endpoints[name]; !ok {
			out = append(out, "Endpoints "+name)
		}
	}
	for _, name := range fx.wantSlices {
		found := false
		for key := range s.Slices {
			found = found || strings.HasPrefix(key, name+" ")
		}
		if !found {
			out = append(out, "EndpointSlices of "+name)
		}
	}
	return out
}

// ipAlloc hands out distinct IPv4 addresses, counting from 10.1.0.1 so that the last octets run
// past 9 and past 99: string and numeric order differ for them.
type ipAlloc struct{ n atomic.Int32 }

func (a *ipAlloc) next() string {
	n := int(a.n.Add(1))
	return fmt.Sprintf("10.%d.%d.%d", 1+n>>16, (n>>8)&255, n&255)
}

// podOpt adjusts a pod before it is written; the spec part goes into the create, the status part
// into the status update that follows.
type podOpt func(p *corev1.Pod, x *podExtras)

// podExtras is what happens to a pod besides its create and status update.
type podExtras struct {
	deleteGrace *int64 // delete the pod with this grace period once it is written
}

var fixedTime = metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))

func onNode(n string) podOpt { return func(p *corev1.Pod, _ *podExtras) { p.Spec.NodeName = n } }
func notReady() podOpt {
	return func(p *corev1.Pod, _ *podExtras) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: fixedTime}}
	}
}
func noReadyCondition() podOpt {
	return func(p *corev1.Pod, _ *podExtras) { p.Status.Conditions = nil }
}
func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod, _ *podExtras) { p.Status.Phase = ph }
}
func noIP() podOpt {
	return func(p *corev1.Pod, _ *podExtras) { p.Status.PodIP, p.Status.PodIPs = "", nil }
}

// onlyPodIP writes status.podIP alone; the apiserver fills status.podIPs from it.
func onlyPodIP() podOpt {
	return func(p *corev1.Pod, _ *podExtras) { p.Status.PodIPs = nil }
}
func ips(addrs ...string) podOpt {
	return func(p *corev1.Pod, _ *podExtras) {
		p.Status.PodIP, p.Status.PodIPs = addrs[0], nil
		for _, a := range addrs {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: a})
		}
	}
}
func ports(ps ...corev1.ContainerPort) podOpt {
	return func(p *corev1.Pod, _ *podExtras) { p.Spec.Containers[0].Ports = ps }
}

// initPorts adds an init container with ports; restartable makes it a sidecar.
func initPorts(restartable bool, ps ...corev1.ContainerPort) podOpt {
	return func(p *corev1.Pod, _ *podExtras) {
		c := corev1.Container{Name: fmt.Sprint("init-", len(p.Spec.InitContainers)), Image: "init", Ports: ps}
		if restartable {
			c.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
}
func hostname(host, subdomain string) podOpt {
	return func(p *corev1.Pod, _ *podExtras) { p.Spec.Hostname, p.Spec.Subdomain = host, subdomain }
}

// terminatingByFinalizer deletes the pod after writing it; a finalizer keeps it, terminating.
func terminatingByFinalizer() podOpt {
	return func(p *corev1.Pod, x *podExtras) {
		p.Finalizers = append(p.Finalizers, "kplane.test/hold")
		x.deleteGrace = new(int64(0))
	}
}

// terminatingByGrace deletes the (bound) pod with a long grace period, which no node agent
// ends here.
func terminatingByGrace() podOpt {
	return func(p *corev1.Pod, x *podExtras) { x.deleteGrace = new(int64(3600)) }
}

func cport(name string, port int32, proto corev1.Protocol) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: proto}
}

// podSpec is one pod to create: by default Running and Ready on node-a, with the next IPv4
// address and one container with port http 8080/TCP.
type podSpec struct {
	name   string
	labels map[string]string
	opts   []podOpt
}

func pod(name, app string, opts ...podOpt) podSpec {
	return podSpec{name: name, labels: map[string]string{"app": app}, opts: opts}
}

func svcPort(name string, port int32, target intstr.IntOrString, proto corev1.Protocol) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: proto}
}

// createFixture writes nodes, services, pods and the hand-written Endpoints into testNS.
func createFixture(t *testing.T, c *client.Client) *fixture {
	t.Helper()
	ctx := context.Background()
	if _, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}); err != nil {
		t.Fatal(err)
	}
	nodes := client.Resource[*corev1.Node](c, "nodes")
	for name, zone := range map[string]string{"node-a": "zone-a", "node-b": "zone-b", "node-c": "zone-c", "node-nozone": ""} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if zone != "" {
			n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		}
		if _, err := nodes.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	sel := func(app string) map[string]string { return map[string]string{"app": app} }
	http := intstr.FromString("http")
	services := []*corev1.Service{
		// Numeric targetPort over pods in every state.
		{ObjectMeta: metav1.ObjectMeta{Name: "numeric", Labels: map[string]string{"tier": "web"}},
			Spec: corev1.ServiceSpec{Selector: sel("web"), Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(8080), tcp)}}},
		// The same pods, every address published.
		{ObjectMeta: metav1.ObjectMeta{Name: "pnra"},
			Spec: corev1.ServiceSpec{Selector: sel("web"), PublishNotReadyAddresses: true,
				Ports: []corev1.ServicePort{svcPort("http", 80, http, tcp)}}},
		// A named targetPort resolving to different numbers, or not at all, plus a numeric one.
		{ObjectMeta: metav1.ObjectMeta{Name: "named"},
			Spec: corev1.ServiceSpec{Selector: sel("named"), Ports: []corev1.ServicePort{
				svcPort("http", 80, http, tcp), svcPort("metrics", 9100, intstr.FromInt32(9100), tcp)}}},
		// Several ports, protocols and an appProtocol.
		{ObjectMeta: metav1.ObjectMeta{Name: "multi"},
			Spec: corev1.ServiceSpec{Selector: sel("multi"), Ports: []corev1.ServicePort{
				{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: tcp, AppProtocol: new("http")},
				svcPort("dns", 53, intstr.FromString("dns"), udp), svcPort("dns-tcp", 53, intstr.FromString("dns-tcp"), tcp)}}},
		// Headless, with and without ports; pods with hostname and subdomain.
		{ObjectMeta: metav1.ObjectMeta{Name: "headless"},
			Spec: corev1.ServiceSpec{Selector: sel("hl"), ClusterIP: corev1.ClusterIPNone,
				Ports: []corev1.ServicePort{svcPort("http", 80, http, tcp)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "headless-noports"},
			Spec: corev1.ServiceSpec{Selector: sel("hl"), ClusterIP: corev1.ClusterIPNone}},
		// A ClusterIP service whose pods name it as their subdomain.
		{ObjectMeta: metav1.ObjectMeta{Name: "hosted"},
			Spec: corev1.ServiceSpec{Selector: sel("hosted"), Ports: []corev1.ServicePort{svcPort("", 80, http, tcp)}}},
		// Labels with the keys the controllers reserve for themselves.
		{ObjectMeta: metav1.ObjectMeta{Name: "reserved-labels", Labels: map[string]string{"team": "x",
			corev1.IsHeadlessService: "", labelEndpointsBy: "someone", discoveryv1.LabelManagedBy: "someone",
			discoveryv1.LabelServiceName: "another"}},
			Spec: corev1.ServiceSpec{Selector: sel("hosted"), Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(8080), tcp)}}},
		// No selector: its Endpoints are written by hand (below) and must be left alone.
		{ObjectMeta: metav1.ObjectMeta{Name: "manual"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(80), tcp)}}},
		// ExternalName with a selector: nothing for it.
		{ObjectMeta: metav1.ObjectMeta{Name: "external"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com", Selector: sel("web")}},
		// Topology hints.
		{ObjectMeta: metav1.ObjectMeta{Name: "prefer-close"},
			Spec: corev1.ServiceSpec{Selector: sel("zoned"), TrafficDistribution: new(corev1.ServiceTrafficDistributionPreferClose),
				Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(8080), tcp)}}},
		// More pods than fit one slice.
		{ObjectMeta: metav1.ObjectMeta{Name: "hundred"},
			Spec: corev1.ServiceSpec{Selector: sel("hundred"), Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(8080), tcp)}}},
		// More addresses than one Endpoints object holds, in two subsets.
		{ObjectMeta: metav1.ObjectMeta{Name: "big"},
			Spec: corev1.ServiceSpec{Selector: sel("big"), Ports: []corev1.ServicePort{svcPort("http", 80, http, tcp)}}},
		// A pod with an IP but no node.
		{ObjectMeta: metav1.ObjectMeta{Name: "unbound"},
			Spec: corev1.ServiceSpec{Selector: sel("unbound"), Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(8080), tcp)}}},
		// Its selector becomes {} below. The API cannot keep an empty map (it is serialised as
		// absent, in Kubernetes too), so this is a service without a selector after all.
		{ObjectMeta: metav1.ObjectMeta{Name: "empty-selector"},
			Spec: corev1.ServiceSpec{Selector: sel("placeholder"), Ports: []corev1.ServicePort{svcPort("", 80, intstr.FromInt32(8080), tcp)}}},
	}
	svcAPI := client.Resource[*corev1.Service](c, "services").Namespace(testNS)
	for _, s := range services {
		if _, err := svcAPI.Create(ctx, s); err != nil {
			t.Fatalf("service %s: %v", s.Name, err)
		}
	}
	// A typed write cannot say {} (an empty map is omitted), a JSON patch can.
	if _, err := svcAPI.Patch(ctx, "empty-selector", types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/selector","value":{}}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err := client.Resource[*corev1.Endpoints](c, "endpoints").Namespace(testNS).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "manual", Labels: map[string]string{"written": "by-hand"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}, {IP: "192.0.2.11"}},
			Ports:     []corev1.EndpointPort{{Port: 80, Protocol: tcp}},
		}},
	}); err != nil {
		t.Fatal(err)
	}

	http8080 := cport("http", 8080, tcp)
	const dup4 = "10.200.0.1"
	pods := []podSpec{
		pod("web-ready-a", "web"),
		pod("web-ready-b", "web", onNode("node-b")),
		pod("web-ready-c", "web", onNode("node-c")),
		pod("web-not-ready", "web", notReady()),
		pod("web-no-condition", "web", noReadyCondition()),
		pod("web-pending-ready", "web", phase(corev1.PodPending)),
		pod("web-unknown-ready", "web", phase(corev1.PodUnknown)),
		pod("web-terminating-finalizer", "web", terminatingByFinalizer()),
		pod("web-terminating-grace", "web", onNode("node-b"), terminatingByGrace()),
		pod("web-terminating-not-ready", "web", notReady(), terminatingByFinalizer()),
		pod("web-failed", "web", phase(corev1.PodFailed)),
		pod("web-succeeded", "web", phase(corev1.PodSucceeded)),
		pod("web-no-ip", "web", phase(corev1.PodPending), noIP(), notReady()),
		pod("web-only-podip", "web", onlyPodIP()),
		pod("web-dual-stack", "web", ips("10.100.0.1", "fd00::100:1")),
		pod("web-ipv6-first", "web", ips("fd00::100:2", "10.100.0.2")),
		pod("web-ipv6-only", "web", ips("fd00::100:3")),
		pod("web-duplicate-ip-1", "web", ips(dup4)),
		pod("web-duplicate-ip-2", "web", ips(dup4), onNode("node-c")),
		pod("web-missing-node", "web", onNode("node-gone")),
		pod("web-no-zone", "web", onNode("node-nozone")),

		pod("named-8080-1", "named"),
		pod("named-8080-2", "named", onNode("node-b")),
		pod("named-8080-not-ready", "named", notReady()),
		pod("named-8081-1", "named", ports(cport("http", 8081, tcp))),
		pod("named-8081-2", "named", ports(cport("http", 8081, tcp)), notReady()),
		pod("named-no-http", "named", ports(cport("web", 8080, tcp))),
		pod("named-udp-http", "named", ports(cport("http", 8080, udp))),
		pod("named-sidecar", "named", ports(), initPorts(true, cport("http", 8082, tcp))),
		pod("named-plain-init", "named", ports(), initPorts(false, cport("http", 8083, tcp))),
		pod("named-container-before-sidecar", "named", ports(cport("http", 8084, tcp)), initPorts(true, cport("http", 8085, tcp))),

		pod("multi-1", "multi", ports(http8080, cport("dns", 5353, udp), cport("dns-tcp", 5354, tcp))),
		pod("multi-2", "multi", onNode("node-b"), ports(http8080, cport("dns", 5353, udp), cport("dns-tcp", 5354, tcp))),
		pod("multi-not-ready", "multi", notReady(), ports(http8080, cport("dns", 5353, udp), cport("dns-tcp", 5354, tcp))),
		pod("multi-udp-only", "multi", ports(http8080, cport("dns", 5353, udp))),

		pod("hl-0", "hl", hostname("hl-0", "headless")),
		pod("hl-1", "hl", onNode("node-b"), hostname("hl-1", "headless")),
		pod("hl-not-ready", "hl", notReady(), hostname("hl-2", "headless")),
		pod("hl-other-subdomain", "hl", hostname("other", "elsewhere")),
		pod("hl-subdomain-only", "hl", hostname("", "headless")),
		pod("hl-noports-host", "hl", hostname("np", "headless-noports")),
		pod("hl-terminating", "hl", hostname("hl-3", "headless"), terminatingByFinalizer()),

		pod("hosted-0", "hosted", hostname("h0", "hosted")),
		pod("hosted-1", "hosted", hostname("h1", "hosted"), notReady()),

		pod("zoned-a", "zoned"),
		pod("zoned-b", "zoned", onNode("node-b")),
		pod("zoned-c", "zoned", onNode("node-c")),
		pod("zoned-no-zone", "zoned", onNode("node-nozone")),
		pod("zoned-not-ready", "zoned", onNode("node-b"), notReady()),
		pod("zoned-terminating", "zoned", onNode("node-c"), terminatingByFinalizer()),

		pod("unbound-0", "unbound", onNode("")),
		pod("unbound-bound", "unbound"),
	}
	for i := range 130 {
		opts := []podOpt{onNode([]string{"node-a", "node-b", "node-c"}[i%3])}
		if i%10 == 9 {
			opts = append(opts, notReady())
		}
		pods = append(pods, pod(fmt.Sprint("hundred-", i), "hundred", opts...))
	}
	// 700 ready and 400 not-ready pods; every third one serves http on 9090, so that the
	// Endpoints object has two subsets whose shares of the truncated not-ready room round up.
	for i := range 1100 {
		opts := []podOpt{onNode([]string{"node-a", "node-b", "node-c"}[i%3])}
		if i%3 == 0 {
			opts = append(opts, ports(cport("http", 9090, tcp)))
		}
		if i >= 700 {
			opts = append(opts, notReady())
		}
		pods = append(pods, pod(fmt.Sprint("big-", i), "big", opts...))
	}
	createPods(t, c, pods)
	return &fixture{
		wantEndpoints: []string{"numeric", "pnra", "named", "multi", "headless", "headless-noports", "hosted",
			"reserved-labels", "prefer-close", "hundred", "big"},
		wantSlices: []string{"numeric", "pnra", "named", "multi", "headless", "headless-noports", "hosted",
			"reserved-labels", "prefer-close", "hundred", "big", "unbound"},
	}
}

// createPods writes the pods (create, status update, maybe delete) on a few goroutines.
func createPods(t *testing.T, c *client.Client, specs []podSpec) {
	t.Helper()
	ctx := context.Background()
	api := client.Resource[*corev1.Pod](c, "pods").Namespace(testNS)
	alloc := &ipAlloc{}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(specs))
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(specs); i = int(next.Add(1)) - 1 {
				if err := createPod(ctx, api, alloc, specs[i]); err != nil {
					errs <- fmt.Errorf("pod %s: %w", specs[i].name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func createPod(ctx context.Context, api *client.Typed[*corev1.Pod], alloc *ipAlloc, spec podSpec) error {
	v4 := alloc.next()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.name, Labels: spec.labels},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{
			Name: "app", Image: "app", Ports: []corev1.ContainerPort{cport("http", 8080, corev1.ProtocolTCP)}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: v4, PodIPs: []corev1.PodIP{{IP: v4}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: fixedTime}}},
	}
	var x podExtras
	for _, o := range spec.opts {
		o(p, &x)
	}
	status := p.Status
	created, err := api.Create(ctx, p)
	if err != nil {
		return err
	}
	created.Status = status
	if _, err := api.UpdateStatus(ctx, created); err != nil {
		return err
	}
	if x.deleteGrace != nil {
		return api.Delete(ctx, spec.name, metav1.DeleteOptions{GracePeriodSeconds: x.deleteGrace})
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Snapshots
//
// A snapshot is the controllers' output in testNS, normalised so that what legitimately differs
// between two runs over the same input does not count:
//
//   - Server-set metadata (uid, resourceVersion, creationTimestamp, generation, managedFields)
//     and the owner reference's uid are dropped; so is a slice's generated name (its
//     generateName stays).
//   - The last-change-trigger-time annotation is reduced to its presence: its value depends on
//     when each controller manager first saw a service. On the Endpoints objects Kubernetes
//     rewrites on every sync of their service even its presence is ignored: truncated ones (it
//     compares the untruncated subsets with the stored, truncated ones) and those of services
//     that carry a label key reserved for Endpoints (service.kubernetes.io/headless,
//     endpoints.kubernetes.io/managed-by: it counts them among the service's labels but not among
//     the Endpoints'). Every sync after the first has no new trigger time and so removes the
//     annotation; whether such a sync happens before the state settles depends on event timing.
//     kplane deliberately writes these objects only when they change, so keeps the annotation of
//     the first write.
//   - Endpoints subsets are keyed by their port set (after repacking every port belongs to
//     exactly one subset) and their ports and addresses are compared as sets. Kubernetes orders
//     subsets by a hash of their content, pod UIDs included, so differently in every run, and
//     the ports of a subset by a hash of each port; kplane sorts both (a deliberate difference:
//     readers of Endpoints treat them as sets).
//   - Truncated Endpoints (over 1000 addresses): the subsets are truncated one after the other
//     in that hash order, each keeping a rounded-up share of the room, so the subsets met last
//     may keep fewer. Which subset that is depends on the order, so per subset the kept list may
//     differ by fewer addresses than there are subsets, and the shorter must be a subset of the
//     longer (both keep the first addresses of the same sorted list); the totals must be equal.
//   - EndpointSlices are grouped per (service, address type, port set). Kubernetes places new
//     endpoints in slices in map order, kplane in a deterministic one, so which endpoint lands in
//     which slice is not compared: per group, the union of the endpoints (each compared in full),
//     the number of slices, their distinct metadata and the order of their ports are.
//   - An Endpoints address with an empty nodeName counts as one without nodeName. Kubernetes
//     gives the address of a pod without a node an empty nodeName, kplane none; since validation
//     refuses the empty name, such an object never gets written (see compare).

type snapshot struct {
	Endpoints map[string]*endpointsSnap // by name
	Slices    map[string]*sliceGroup    // by "<service> <addressType> <ports>"
}

type endpointsSnap struct {
	Labels      string
	Annotations string
	Truncated   bool
	Subsets     map[string]*subsetSnap // by port set
	// Unbound lists the IPs of addresses without a nodeName (or with an empty one).
	Unbound []string
}

type subsetSnap struct {
	Addresses, NotReady []string // normalised addresses, sorted
}

type sliceGroup struct {
	Slices     int
	Metadata   []string          // distinct normalised metadata of the group's slices
	PortOrders []string          // distinct port lists as written
	Endpoints  map[string]string // by pod (or addresses), the normalised endpoint
	Duplicates []string          // endpoint keys found more than once in the group
}

func (s *snapshot) render() string {
	data, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func takeSnapshot(t *testing.T, c *client.Client) *snapshot {
	t.Helper()
	ctx := context.Background()
	eps, err := client.Resource[*corev1.Endpoints](c, "endpoints").Namespace(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sls, err := client.Resource[*discoveryv1.EndpointSlice](c, "endpointslices").Namespace(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := client.Resource[*corev1.Service](c, "services").Namespace(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reservedLabels := map[string]bool{}
	for _, svc := range svcs.Items {
		_, headless := svc.Labels[corev1.IsHeadlessService]
		_, managed := svc.Labels[labelEndpointsBy]
		reservedLabels[svc.Name] = headless || managed
	}
	s := &snapshot{Endpoints: map[string]*endpointsSnap{}, Slices: map[string]*sliceGroup{}}
	for _, e := range eps.Items {
		s.Endpoints[e.Name] = normaliseEndpoints(e, reservedLabels[e.Name])
	}
	for _, sl := range sls.Items {
		addSlice(s.Slices, sl)
	}
	for _, g := range s.Slices {
		sort.Strings(g.Metadata)
		sort.Strings(g.PortOrders)
		sort.Strings(g.Duplicates)
	}
	return s
}

func maskedAnnotations(a map[string]string) string {
	out := map[string]string{}
	for k, v := range a {
		if k == corev1.EndpointsLastChangeTriggerTime {
			v = "<set>"
		}
		out[k] = v
	}
	return mustJSON(out)
}

// normaliseEndpoints normalises one Endpoints object; svcReservedLabels says whether its service
// carries a label key reserved for Endpoints.
func normaliseEndpoints(e *corev1.Endpoints, svcReservedLabels bool) *endpointsSnap {
	out := &endpointsSnap{
		Labels:    mustJSON(e.Labels),
		Truncated: e.Annotations[corev1.EndpointsOverCapacity] != "",
		Subsets:   map[string]*subsetSnap{},
	}
	annotations := e.Annotations
	if out.Truncated || svcReservedLabels {
		annotations = maps.Clone(annotations)
		delete(annotations, corev1.EndpointsLastChangeTriggerTime)
	}
	out.Annotations = maskedAnnotations(annotations)
	addrs := func(as []corev1.EndpointAddress) []string {
		var l []string
		for _, a := range as {
			if a.NodeName != nil && *a.NodeName == "" {
				a.NodeName = nil
			}
			if a.NodeName == nil && !slices.Contains(out.Unbound, a.IP) {
				out.Unbound = append(out.Unbound, a.IP)
			}
			l = append(l, mustJSON(a))
		}
		sort.Strings(l)
		return l
	}
	for _, sub := range e.Subsets {
		var ps []string
		for _, p := range sub.Ports {
			ps = append(ps, mustJSON(p))
		}
		sort.Strings(ps)
		key := "[" + strings.Join(ps, ",") + "]"
		if prev, ok := out.Subsets[key]; ok {
			// Not canonical: two subsets with the same ports. Keep both, visibly.
			key += fmt.Sprintf(" (again, %d)", len(prev.Addresses))
		}
		out.Subsets[key] = &subsetSnap{Addresses: addrs(sub.Addresses), NotReady: addrs(sub.NotReadyAddresses)}
	}
	sort.Strings(out.Unbound)
	return out
}

func addSlice(groups map[string]*sliceGroup, sl *discoveryv1.EndpointSlice) {
	var ps []string
	for _, p := range sl.Ports {
		ps = append(ps, portString(p))
	}
	sortedPorts := slices.Sorted(slices.Values(ps))
	key := fmt.Sprintf("%s %s [%s]", sl.Labels[discoveryv1.LabelServiceName], sl.AddressType, strings.Join(sortedPorts, " "))
	g := groups[key]
	if g == nil {
		g = &sliceGroup{Endpoints: map[string]string{}}
		groups[key] = g
	}
	g.Slices++

	owners := make([]metav1.OwnerReference, len(sl.OwnerReferences))
	for i, o := range sl.OwnerReferences {
		o.UID = ""
		owners[i] = o
	}
	meta := mustJSON(map[string]any{
		"generateName":    sl.GenerateName,
		"labels":          sl.Labels,
		"annotations":     maskedAnnotations(sl.Annotations),
		"ownerReferences": owners,
		"finalizers":      sl.Finalizers,
	})
	if !slices.Contains(g.Metadata, meta) {
		g.Metadata = append(g.Metadata, meta)
	}
	if order := mustJSON(sl.Ports); !slices.Contains(g.PortOrders, order) {
		g.PortOrders = append(g.PortOrders, order)
	}
	for _, ep := range sl.Endpoints {
		k := strings.Join(ep.Addresses, ",")
		if ep.TargetRef != nil {
			k = ep.TargetRef.Name + " " + k
		}
		if _, dup := g.Endpoints[k]; dup {
			g.Duplicates = append(g.Duplicates, k)
		}
		g.Endpoints[k] = mustJSON(ep)
	}
}

func portString(p discoveryv1.EndpointPort) string {
	var b strings.Builder
	if p.Name != nil {
		b.WriteString(*p.Name)
	}
	b.WriteString(":")
	if p.Port != nil {
		fmt.Fprint(&b, *p.Port)
	}
	b.WriteString("/")
	if p.Protocol != nil {
		b.WriteString(string(*p.Protocol))
	}
	if p.AppProtocol != nil {
		b.WriteString("(" + *p.AppProtocol + ")")
	}
	return b.String()
}

// ---------------------------------------------------------------------------------------------
// Comparison

// compare lists every difference between the reference's snapshot and kplane's, one line each,
// and separately the differences that are known and deliberate:
//
//   - For a pod with an IP but no node, Kubernetes writes an Endpoints address with an empty
//     nodeName, which Endpoints validation refuses, so the whole object is never written (in a
//     real cluster just the same); kplane leaves the field out and writes the object. So an
//     Endpoints object only kplane wrote is fine when it has an address without a node.
func compare(ref, got *snapshot) (diffs, tolerated []string) {
	var out []string
	d := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	for _, name := range unionKeys(ref.Endpoints, got.Endpoints) {
		r, g := ref.Endpoints[name], got.Endpoints[name]
		switch {
		case g == nil:
			d("Endpoints %s: only the reference wrote it", name)
			continue
		case r == nil && len(g.Unbound) > 0:
			tolerated = append(tolerated, fmt.Sprintf("Endpoints %s: only kplane wrote it; the reference cannot, its address for the pod without a node (%s) has an empty nodeName, which validation refuses",
				name, strings.Join(g.Unbound, ", ")))
			continue
		case r == nil:
			d("Endpoints %s: only kplane wrote it", name)
			continue
		}
		if r.Labels != g.Labels {
			d("Endpoints %s labels:\n  - %s\n  + %s", name, r.Labels, g.Labels)
		}
		if r.Annotations != g.Annotations {
			d("Endpoints %s annotations:\n  - %s\n  + %s", name, r.Annotations, g.Annotations)
		}
		truncated := r.Truncated && g.Truncated
		var rTotal, gTotal [2]int
		for _, ports := range unionKeys(r.Subsets, g.Subsets) {
			rs, gs := r.Subsets[ports], g.Subsets[ports]
			switch {
			case gs == nil:
				d("Endpoints %s subset with ports %s: only in the reference (%d ready, %d not ready)", name, ports, len(rs.Addresses), len(rs.NotReady))
				continue
			case rs == nil:
				d("Endpoints %s subset with ports %s: only in kplane (%d ready, %d not ready)", name, ports, len(gs.Addresses), len(gs.NotReady))
				continue
			}
			for i, lists := range [2][2][]string{{rs.Addresses, gs.Addresses}, {rs.NotReady, gs.NotReady}} {
				what := [2]string{"addresses", "notReadyAddresses"}[i]
				rTotal[i] += len(lists[0])
				gTotal[i] += len(lists[1])
				if truncated {
					out = append(out, compareTruncated(fmt.Sprintf("Endpoints %s subset %s %s", name, ports, what), lists[0], lists[1], len(r.Subsets))...)
					continue
				}
				out = append(out, setDiff(fmt.Sprintf("Endpoints %s subset %s %s", name, ports, what), lists[0], lists[1])...)
			}
		}
		if truncated && rTotal != gTotal {
			d("Endpoints %s: truncated to %d ready + %d not ready addresses by the reference, %d + %d by kplane", name, rTotal[0], rTotal[1], gTotal[0], gTotal[1])
		}
	}

	for _, key := range unionKeys(ref.Slices, got.Slices) {
		r, g := ref.Slices[key], got.Slices[key]
		switch {
		case g == nil:
			d("EndpointSlices %s: only the reference wrote such slices (%d, %d endpoints)", key, r.Slices, len(r.Endpoints))
			continue
		case r == nil:
			d("EndpointSlices %s: only kplane wrote such slices (%d, %d endpoints)", key, g.Slices, len(g.Endpoints))
			continue
		}
		if r.Slices != g.Slices {
			d("EndpointSlices %s: %d slices from the reference, %d from kplane", key, r.Slices, g.Slices)
		}
		out = append(out, setDiff("EndpointSlices "+key+" metadata", r.Metadata, g.Metadata)...)
		out = append(out, setDiff("EndpointSlices "+key+" port order", r.PortOrders, g.PortOrders)...)
		out = append(out, setDiff("EndpointSlices "+key+" duplicate endpoints", r.Duplicates, g.Duplicates)...)
		for _, ep := range unionKeys(r.Endpoints, g.Endpoints) {
			re, rok := r.Endpoints[ep]
			ge, gok := g.Endpoints[ep]
			switch {
			case !gok:
				d("EndpointSlices %s endpoint %s: only from the reference: %s", key, ep, re)
			case !rok:
				d("EndpointSlices %s endpoint %s: only from kplane: %s", key, ep, ge)
			case re != ge:
				d("EndpointSlices %s endpoint %s:\n  - %s\n  + %s", key, ep, re, ge)
			}
		}
	}
	return out, tolerated
}

// compareTruncated compares the addresses one subset kept after truncation: the counts may
// differ by less than the number of subsets (see the normalisation notes), and the shorter list
// must be contained in the longer.
func compareTruncated(what string, ref, got []string, subsets int) []string {
	var out []string
	if diff := len(ref) - len(got); diff >= subsets || -diff >= subsets {
		out = append(out, fmt.Sprintf("%s: the reference kept %d, kplane %d (more apart than the rounding of %d subsets allows)", what, len(ref), len(got), subsets))
	}
	onlyRef, onlyGot := minus(ref, got), minus(got, ref)
	if len(onlyRef) > 0 && len(onlyGot) > 0 {
		out = append(out, fmt.Sprintf("%s: kept different addresses: %d only by the reference (e.g. %s), %d only by kplane (e.g. %s)",
			what, len(onlyRef), onlyRef[0], len(onlyGot), onlyGot[0]))
	}
	return out
}

// setDiff lists the elements only in ref and only in got.
func setDiff(what string, ref, got []string) []string {
	var out []string
	for _, x := range minus(ref, got) {
		out = append(out, fmt.Sprintf("%s: - %s", what, x))
	}
	for _, x := range minus(got, ref) {
		out = append(out, fmt.Sprintf("%s: + %s", what, x))
	}
	return out
}

// minus returns the elements of a not in b.
func minus(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
