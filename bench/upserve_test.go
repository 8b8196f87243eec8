package bench

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// echoReplicas is the replica count of examples/echo.yaml.
const echoReplicas = 3

// The stages of `kubectl apply -f examples/echo.yaml` until its Service answers from every pod,
// in order. Each is the moment the last of the three pods reached it (as this process sees the
// watch events), from the start of kubectl; proxySynced comes from the proxy's log.
var serveStages = []string{"kubectl-returned", "deployment", "replicaset", "pods-created", "pods-scheduled",
	"pods-running", "pods-ready", "slice-ready", "proxy-synced", "first-answer", "all-answering"}

// milestones records when each stage was first reached.
type milestones struct {
	mu sync.Mutex
	at map[string]time.Time
	// per-pod stages: pod name → stage → time
	pods map[string]map[string]time.Time
}

func (m *milestones) mark(stage string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.at[stage]; !ok {
		m.at[stage] = time.Now()
	}
}

// markPod records that pod reached stage, and the stage itself once every pod has.
func (m *milestones) markPod(pod, stage string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods[pod] == nil {
		m.pods[pod] = map[string]time.Time{}
	}
	if _, ok := m.pods[pod][stage]; ok {
		return
	}
	m.pods[pod][stage] = time.Now()
	n := 0
	for _, stages := range m.pods {
		if _, ok := stages[stage]; ok {
			n++
		}
	}
	if _, ok := m.at[stage]; !ok && n == echoReplicas {
		m.at[stage] = time.Now()
	}
}

func (m *milestones) get(stage string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[stage]
	return t, ok
}

// measureEchoServe applies examples/echo.yaml with kubectl against `kplane up` (whose log, at
// -v 1, is upLog) and reports, in ms from the start of kubectl, when each stage was reached; the
// headline is apply-to-serving-ms: until every pod has answered at the Service's ClusterIP.
func measureEchoServe(b *testing.B, c *client.Client, kubeconfig, upLog string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &milestones{at: map[string]time.Time{}, pods: map[string]map[string]time.Time{}}
	f := cache.NewFactory(c, "default")
	deployments := cache.For[*appsv1.Deployment](f, "deployments")
	replicasets := cache.For[*appsv1.ReplicaSet](f, "replicasets")
	pods := cache.For[*corev1.Pod](f, "pods")
	services := cache.For[*corev1.Service](f, "services")
	slices := cache.For[*discoveryv1.EndpointSlice](f, "endpointslices")
	deployments.AddHandler(cache.Handler[*appsv1.Deployment]{OnAdd: func(*appsv1.Deployment, bool) { m.mark("deployment") }}, 0)
	replicasets.AddHandler(cache.Handler[*appsv1.ReplicaSet]{OnAdd: func(*appsv1.ReplicaSet, bool) { m.mark("replicaset") }}, 0)
	notePod := func(p *corev1.Pod) {
		m.markPod(p.Name, "pods-created")
		if p.Spec.NodeName != "" {
			m.markPod(p.Name, "pods-scheduled")
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running != nil {
				m.markPod(p.Name, "pods-running")
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				m.markPod(p.Name, "pods-ready")
			}
		}
	}
	pods.AddHandler(cache.Handler[*corev1.Pod]{OnAdd: func(p *corev1.Pod, _ bool) { notePod(p) }, OnUpdate: func(_, p *corev1.Pod) { notePod(p) }}, 0)
	clusterIP := make(chan string, 1)
	services.AddHandler(cache.Handler[*corev1.Service]{OnAdd: func(s *corev1.Service, _ bool) {
		if s.Name == "echo" {
			clusterIP <- s.Spec.ClusterIP
		}
	}}, 0)
	noteSlice := func(s *discoveryv1.EndpointSlice) {
		ready := 0
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				ready++
			}
		}
		if s.Labels[discoveryv1.LabelServiceName] == "echo" && ready == echoReplicas {
			m.mark("slice-ready")
		}
	}
	slices.AddHandler(cache.Handler[*discoveryv1.EndpointSlice]{OnAdd: func(s *discoveryv1.EndpointSlice, _ bool) { noteSlice(s) },
		OnUpdate: func(_, s *discoveryv1.EndpointSlice) { noteSlice(s) }}, 0)
	f.Start(ctx)
	f.WaitForCacheSync(ctx)

	// Ask the ClusterIP over and over, each time on a new connection (the proxy balances
	// connections), as soon as the Service exists.
	answered := make(chan struct{})
	go func() {
		var ip string
		select {
		case ip = <-clusterIP:
		case <-ctx.Done():
			return
		}
		hc := http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		seen := map[string]bool{}
		for ctx.Err() == nil {
			resp, err := hc.Get("http://" + ip + "/")
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			name := strings.TrimSpace(string(body))
			if resp.StatusCode != http.StatusOK || seen[name] {
				continue
			}
			seen[name] = true
			m.mark("first-answer")
			if len(seen) == echoReplicas {
				m.mark("all-answering")
				close(answered)
				return
			}
		}
	}()

	began := time.Now()
	apply := exec.Command("kubectl", "apply", "-f", "../examples/echo.yaml")
	apply.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if out, err := apply.CombinedOutput(); err != nil {
		b.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	m.mark("kubectl-returned")
	select {
	case <-answered:
	case <-time.After(time.Minute):
		b.Fatalf("examples/echo.yaml not answering from every pod after a minute (log: %s)", upLog)
	}
	last, _ := m.get("all-answering")
	if synced, ok := lastProxySync(upLog, began, last); ok {
		m.mu.Lock()
		m.at["proxy-synced"] = synced
		m.mu.Unlock()
	}
	for _, stage := range serveStages {
		if at, ok := m.get(stage); ok {
			b.ReportMetric(float64(at.Sub(began).Microseconds())/1000, stage+"-ms")
		}
	}
	b.ReportMetric(float64(last.Sub(began).Microseconds())/1000, "apply-to-serving-ms")
}

// lastProxySync is the time of the last "data path synced" line the proxy logged (at -v 1)
// between from and to, to the log's millisecond.
func lastProxySync(path string, from, to time.Time) (time.Time, bool) {
	file, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer file.Close()
	var last time.Time
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="proxy: data path synced"`) || !strings.HasPrefix(line, "time=") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || at.Before(from.Truncate(time.Millisecond)) || at.After(to) {
			continue
		}
		last = at
	}
	return last, !last.IsZero()
}
