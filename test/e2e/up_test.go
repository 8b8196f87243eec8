//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestUpWalkThrough runs `kplane up` and then the README's walk-through with kubectl and real
// HTTP, each command right after the one before, as typed without pauses: examples/echo.yaml
// rolls out and, as soon as `rollout status` returns, its Service answers every request, from
// every one of its pods; the same after scaling; a rolling update completes without a failed
// request, and right after it only the new pods answer, all of them.
func TestUpWalkThrough(t *testing.T) {
	dir := t.TempDir()
	up := startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	up.waitLog(t, "kplane is up")
	k := kc{t: t, kubeconfig: filepath.Join(dir, "kubeconfig")}

	k.ok("apply", "-f", "../../examples/echo.yaml")
	k.ok("rollout", "status", "deployment/echo", "--timeout=30s")
	out := k.ok("get", "pods,svc,endpointslices", "-o", "wide")
	expectContains(t, "kubectl get pods,svc,endpointslices", out, "service/echo", "endpointslice.discovery.k8s.io/echo-", "Running")
	url := "http://" + k.jsonpath("service/echo", "{.spec.clusterIP}") + "/"
	pods := k.currentPods()
	if len(pods) != 3 {
		t.Fatalf("pods after the rollout: %v, want 3", pods)
	}
	expectEveryPodAnswers(t, "after the rollout", url, pods)

	k.ok("scale", "deployment", "echo", "--replicas=5")
	k.ok("rollout", "status", "deployment/echo", "--timeout=30s")
	if pods = k.currentPods(); len(pods) != 5 {
		t.Fatalf("pods after scaling: %v, want 5", pods)
	}
	expectEveryPodAnswers(t, "after scaling to 5", url, pods)

	// A rolling update with maxUnavailable 0, under a steady stream of requests.
	var failed, served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := httpGet(url); err != nil {
				failed.Add(1)
				t.Logf("request failed during the rollout: %v", err)
			} else {
				served.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	k.ok("set", "env", "deployment/echo", "GREETING=v2")
	k.ok("rollout", "status", "deployment/echo", "--timeout=60s")
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed during the rolling update", failed.Load(), failed.Load()+served.Load())
	}
	newPods := k.currentPods()
	if len(newPods) != 5 {
		t.Fatalf("pods after the rolling update: %v, want 5", newPods)
	}
	for _, p := range newPods {
		if slices.Contains(pods, p) {
			t.Fatalf("pod %s of the old template is still current after the rolling update", p)
		}
	}
	expectEveryPodAnswers(t, "after the rolling update", url, newPods)
	expectContains(t, "kubectl logs deployment/echo", k.ok("logs", "deployment/echo"), "echo listening", ":8080")
}

// currentPods names the namespace's pods that are not being deleted (the old pods of a
// rolling update may still be draining).
func (k kc) currentPods() []string {
	k.t.Helper()
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(k.ok("get", "pods", "-o", "json")), &list); err != nil {
		k.t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil {
			names = append(names, p.Metadata.Name)
		}
	}
	return names
}

// expectEveryPodAnswers asks url twice per pod, each time on a new connection, once: every
// request must be answered, by one of pods, and every pod must answer (the proxy balances
// round robin, so a pod left out is one it does not know yet).
func expectEveryPodAnswers(t *testing.T, when, url string, pods []string) {
	t.Helper()
	seen := map[string]int{}
	for range 2 * len(pods) {
		name, err := httpGet(url)
		if err != nil {
			t.Errorf("%s: %v", when, err)
			continue
		}
		seen[name]++
	}
	for name := range seen {
		if !slices.Contains(pods, name) {
			t.Errorf("%s: answered by %s, not one of %v", when, name, pods)
		}
	}
	for _, p := range pods {
		if seen[p] == 0 {
			t.Errorf("%s: answers %v, want every one of %v", when, seen, pods)
			return
		}
	}
}

// httpGet asks url over a new connection (the proxy balances connections, not requests) and
// returns the trimmed answer.
func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return strings.TrimSpace(string(body)), err
}

// TestUpRestart: `kplane up` stops cleanly on SIGTERM (pods terminated, exit 0), and started
// again on the same data dir it resumes the stored state: the same pods run again and the
// Service answers from each of them at the same ClusterIP.
func TestUpRestart(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	k := kc{t: t, kubeconfig: kubeconfig}
	up := func() *roleProcess {
		p := startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
		until(t, "the API and a Ready node", func() error {
			r := k.run("", "get", "nodes", "-o", `jsonpath={.items[0].status.conditions[?(@.type=="Ready")].status}`)
			if r.err == nil && r.stdout != "True" {
				return fmt.Errorf("node Ready=%q", r.stdout)
			}
			return r.err
		})
		return p
	}
	everyPodAnswers := func(url string, pods []string) func() error {
		return func() error {
			seen := map[string]bool{}
			for range 4 * len(pods) {
				name, err := httpGet(url)
				if err != nil {
					return err
				}
				seen[name] = true
			}
			for _, p := range pods {
				if !seen[p] {
					return fmt.Errorf("answers from %v, want every one of %v", seen, pods)
				}
			}
			return nil
		}
	}

	first := up()
	k.ok("apply", "-f", "../../examples/echo.yaml")
	k.ok("rollout", "status", "deployment/echo", "--timeout=30s")
	url := "http://" + k.jsonpath("service/echo", "{.spec.clusterIP}") + "/"
	pods := strings.Fields(k.jsonpath("pods", "{.items[*].metadata.name}"))
	podIPs := k.jsonpath("pods", "{.items[*].status.podIP}")
	until(t, "every pod answering", everyPodAnswers(url, pods))

	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.exited:
		if first.err != nil {
			t.Fatalf("kplane up did not exit cleanly on SIGTERM: %v\n%s", first.err, first.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("kplane up did not stop within 30 s of SIGTERM:\n%s", first.out.String())
	}
	if _, err := httpGet(url); err == nil {
		t.Errorf("the Service still answers after kplane up stopped")
	}

	up()
	if got := strings.Fields(k.jsonpath("pods", "{.items[*].metadata.name}")); strings.Join(got, " ") != strings.Join(pods, " ") {
		t.Errorf("pods after the restart %v, want the stored %v", got, pods)
	}
	until(t, "the stored pods answering again at the same ClusterIP", everyPodAnswers(url, pods))
	if got := k.jsonpath("pods", "{.items[*].status.podIP}"); got != podIPs {
		t.Errorf("pod IPs after the restart %q, want the earlier %q", got, podIPs)
	}
}

// TestUpSideBySide runs two `kplane up` at once on different data dirs: both start (every
// port they open is a free one, and they report them), they take different loopback ranges,
// and each one's echo Service answers from its own pods only.
func TestUpSideBySide(t *testing.T) {
	type instance struct {
		k    kc
		up   *roleProcess
		line string // the "kplane is up" log line
		url  string
		pods []string
	}
	var ups [2]*instance
	for i := range ups {
		dir := t.TempDir()
		ups[i] = &instance{k: kc{t: t, kubeconfig: filepath.Join(dir, "kubeconfig")},
			up: startRole(t, "up", "--secure-port", "0", "--data-dir", dir)}
	}
	for _, u := range ups {
		u.up.waitLog(t, "kplane is up")
		for _, line := range strings.Split(u.up.out.String(), "\n") {
			if strings.Contains(line, "kplane is up") {
				u.line = line
			}
		}
		u.k.ok("apply", "-f", "../../examples/echo.yaml")
	}
	reported := func(line, key string) string {
		_, v, _ := strings.Cut(line, " "+key+"=")
		v, _, _ = strings.Cut(v, " ")
		return v
	}
	for _, key := range []string{"apiserver", "proxyHealthz", "proxyMetrics", "nodeAgent", "serviceClusterIPRange", "podCIDR"} {
		a, b := reported(ups[0].line, key), reported(ups[1].line, key)
		if a == "" || a == b {
			t.Errorf("%s: first up %q, second %q; want two different ones", key, a, b)
		}
	}
	for _, u := range ups {
		u.k.ok("rollout", "status", "deployment/echo", "--timeout=30s")
		u.url = "http://" + u.k.jsonpath("service/echo", "{.spec.clusterIP}") + "/"
		u.pods = u.k.currentPods()
	}
	if ups[0].url == ups[1].url {
		t.Fatalf("both echo Services at %s", ups[0].url)
	}
	for i, u := range ups {
		expectEveryPodAnswers(t, fmt.Sprintf("up %d", i), u.url, u.pods)
	}
	for i, u := range ups {
		select {
		case <-u.up.exited:
			t.Errorf("up %d exited: %v", i, u.up.err)
		default:
		}
	}
}
