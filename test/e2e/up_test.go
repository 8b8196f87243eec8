//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUp runs `kplane up` and uses it as a person would: a Deployment of the built-in echo
// workload, exposed as a Service, answers HTTP requests through its ClusterIP from both pods;
// scaling down leaves one pod serving.
func TestUp(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "a Ready node", func() error {
		r := k.run("", "get", "nodes", "-o", "jsonpath={.items[0].status.conditions[?(@.type==\"Ready\")].status}")
		if r.err == nil && r.stdout != "True" {
			return fmt.Errorf("node Ready=%q", r.stdout)
		}
		return r.err
	})
	k.ok("create", "deployment", "web", "--image=echo", "--replicas=2", "--port=8080", "--", "kplane", "echo")
	k.ok("expose", "deployment", "web", "--port=80", "--target-port=8080")
	k.ok("rollout", "status", "deployment/web", "--timeout=30s")
	url := "http://" + k.jsonpath("service/web", "{.spec.clusterIP}") + "/"
	pods := strings.Fields(k.jsonpath("pods", "{.items[*].metadata.name}"))
	if len(pods) != 2 {
		t.Fatalf("pods %v, want 2", pods)
	}
	get := func() (string, error) {
		// A new connection each time: the proxy balances connections, not requests.
		c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body)), err
	}
	until(t, "both pods answering through the Service", func() error {
		seen := map[string]bool{}
		for range 8 {
			name, err := get()
			if err != nil {
				return err
			}
			seen[name] = true
		}
		for _, p := range pods {
			if !seen[p] {
				return fmt.Errorf("answers %v, want every one of %v", seen, pods)
			}
		}
		return nil
	})

	k.ok("scale", "deployment", "web", "--replicas=1")
	until(t, "one pod left, answering", func() error {
		left := strings.Fields(k.jsonpath("pods", "{.items[*].metadata.name}"))
		if len(left) != 1 {
			return fmt.Errorf("pods %v", left)
		}
		for range 4 {
			name, err := get()
			if err != nil {
				return err
			}
			if name != left[0] {
				return fmt.Errorf("answer from %s, want %s", name, left[0])
			}
		}
		return nil
	})
}
