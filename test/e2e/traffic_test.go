//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// echoBackend answers every TCP connection on addr with name, until the test ends.
func echoBackend(t *testing.T, addr, name string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(conn, name)
			conn.Close()
		}
	}()
}

// ask connects to addr and returns the first line it answers.
func ask(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func until(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(watchTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const echoApp = `
apiVersion: v1
kind: Node
metadata: {name: traffic-node}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo-1, labels: {app: echo}}
spec:
  nodeName: traffic-node
  containers: [{name: echo, image: echo, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo-2, labels: {app: echo}}
spec:
  nodeName: traffic-node
  containers: [{name: echo, image: echo, ports: [{name: http, containerPort: 8080}]}]
`

// TestServicesCarryTraffic runs the system as processes: an apiserver handing out ClusterIPs
// from 127.65.0.0/16, the controller manager writing EndpointSlices from pods, and the
// userspace proxy listening on the ClusterIPs. The pods' "containers" are listeners of this
// test on their pod IPs. A connection to the Service reaches the ready pods, a pod turning not
// ready stops getting new connections, and a deleted Service stops answering.
func TestServicesCarryTraffic(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	startRole(t, "apiserver", "--secure-port", "0", "--data-dir", filepath.Join(dir, "data"),
		"--write-kubeconfig", kubeconfig, "--service-cluster-ip-range", "127.65.0.0/16")
	until(t, "the apiserver's kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the apiserver to answer", func() error { return k.run("", "get", "--raw", "/readyz").err })

	startRole(t, "controller-manager", "--kubeconfig", kubeconfig, "--secure-port", "0", "--leader-elect=false")
	healthz, metrics := freeAddr(t), freeAddr(t)
	startRole(t, "proxy", "--kubeconfig", kubeconfig, "--proxy-mode", "userspace", "--hostname-override", "traffic-node",
		"--healthz-bind-address", healthz, "--metrics-bind-address", metrics, "--iptables-min-sync-period", "0")

	echoBackend(t, "127.0.21.1:8080", "echo-1")
	echoBackend(t, "127.0.21.2:8080", "echo-2")
	k.ok("create", "namespace", "traffic")
	k.ns = "traffic"
	k.okIn(echoApp, "apply", "-f", "-")
	for i, pod := range []string{"echo-1", "echo-2"} {
		k.ok("patch", "pod", pod, "--subresource=status", "--type=merge", "-p", podStatus(fmt.Sprintf("127.0.21.%d", i+1), "True"))
	}
	service := k.jsonpath("service/echo", "{.spec.clusterIP}") + ":80"

	until(t, "both pods answering through the Service", func() error {
		seen := map[string]bool{}
		for range 10 {
			a, err := ask(service)
			if err != nil {
				return err
			}
			seen[a] = true
		}
		if !seen["echo-1"] || !seen["echo-2"] {
			return fmt.Errorf("answers %v", seen)
		}
		return nil
	})

	k.ok("patch", "pod", "echo-1", "--subresource=status", "--type=merge", "-p", podStatus("127.0.21.1", "False"))
	until(t, "only the ready pod answering", func() error {
		for range 10 {
			a, err := ask(service)
			if err != nil {
				return err
			}
			if a != "echo-2" {
				return fmt.Errorf("answer from %s", a)
			}
		}
		return nil
	})

	for url, want := range map[string]string{
		"http://" + healthz + "/healthz": `"healthy":true`,
		"http://" + healthz + "/livez":   `"healthy":true`,
		"http://" + metrics + "/metrics": "kubeproxy_network_programming_duration_seconds_count",
	} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, want %q in:\n%.2000s", url, resp.StatusCode, want, body)
		}
	}

	k.ok("delete", "service", "echo")
	until(t, "the Service no longer answering", func() error {
		if a, err := ask(service); err == nil {
			return fmt.Errorf("still answered by %s", a)
		}
		return nil
	})
}
