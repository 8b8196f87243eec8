//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestUpWalkThrough runs `kplane up` and then the README's walk-through with kubectl and real
// HTTP: examples/echo.yaml rolls out, its Service answers from every pod, scaling adds answers,
// and a rolling update completes without a failed request.
func TestUpWalkThrough(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "a Ready node", func() error {
		r := k.run("", "get", "nodes", "-o", `jsonpath={.items[0].status.conditions[?(@.type=="Ready")].status}`)
		if r.err == nil && r.stdout != "True" {
			return fmt.Errorf("node Ready=%q", r.stdout)
		}
		return r.err
	})

	k.ok("apply", "-f", "../../examples/echo.yaml")
	k.ok("rollout", "status", "deployment/echo", "--timeout=30s")
	out := k.ok("get", "pods,svc,endpointslices", "-o", "wide")
	expectContains(t, "kubectl get pods,svc,endpointslices", out, "service/echo", "endpointslice.discovery.k8s.io/echo-", "Running")
	url := "http://" + k.jsonpath("service/echo", "{.spec.clusterIP}") + "/"

	answers := func(n int) (map[string]int, error) {
		seen := map[string]int{}
		for range n {
			name, err := httpGet(url)
			if err != nil {
				return seen, err
			}
			seen[name]++
		}
		return seen, nil
	}
	podNames := func() []string { return strings.Fields(k.jsonpath("pods", "{.items[*].metadata.name}")) }
	answeredByAll := func(pods []string) func() error {
		return func() error {
			seen, err := answers(3 * len(pods))
			if err != nil {
				return err
			}
			for _, p := range pods {
				if seen[p] == 0 {
					return fmt.Errorf("answers %v, want every one of %v", seen, pods)
				}
			}
			return nil
		}
	}
	until(t, "every pod answering through the Service", answeredByAll(podNames()))

	k.ok("scale", "deployment", "echo", "--replicas=5")
	k.ok("rollout", "status", "deployment/echo", "--timeout=30s")
	until(t, "five pods answering", func() error {
		pods := podNames()
		if len(pods) != 5 {
			return fmt.Errorf("pods %v", pods)
		}
		return answeredByAll(pods)()
	})

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
	until(t, "the new pods answering", func() error {
		pods := podNames()
		if len(pods) != 5 {
			return fmt.Errorf("pods %v", pods)
		}
		return answeredByAll(pods)()
	})
	expectContains(t, "kubectl logs deployment/echo", k.ok("logs", "deployment/echo"), "echo listening", ":8080")
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
}
