//go:build linux

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/controller/servicelb"
)

// lbApp is a Deployment of two echo servers behind a Service of type LoadBalancer.
const lbApp = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec:
      containers:
      - name: echo
        image: kplane/echo
        command: [kplane, echo, --port=8080]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: shop}
spec:
  type: LoadBalancer
  selector: {app: shop}
  ports: [{name: http, port: 80, targetPort: http}]
`

// TestUpLoadBalancer runs `kplane up` with its default load-balancer pool (loopback addresses,
// which answer on this machine with no setup) and uses it with real kubectl and HTTP: the
// LoadBalancer Service's EXTERNAL-IP comes from the pool up reports, HTTP to that address and
// the service port reaches every pod of the Deployment, and deleting the Service releases the
// address (the finalizer goes, the address stops answering, the next Service gets it).
func TestUpLoadBalancer(t *testing.T) {
	dir := t.TempDir()
	up := startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	up.waitLog(t, "kplane is up")
	m := regexp.MustCompile(`loadBalancerIPRange=(\S+)`).FindStringSubmatch(up.out.String())
	if m == nil {
		t.Fatalf("up did not report its load-balancer range:\n%s", up.out.String())
	}
	pool, err := servicelb.ParsePool(m[1])
	if err != nil {
		t.Fatalf("up's load-balancer range: %v", err)
	}
	if !netip.MustParsePrefix("127.0.0.0/8").Contains(pool.First()) {
		t.Errorf("the default pool %s is not on loopback", pool)
	}
	k := kc{t: t, kubeconfig: filepath.Join(dir, "kubeconfig")}

	k.okIn(lbApp, "apply", "-f", "-")
	k.ok("rollout", "status", "deployment/shop", "--timeout=60s")
	var ip string
	until(t, "an EXTERNAL-IP in kubectl get svc", func() error {
		row := parseTable(t, k.ok("get", "svc", "shop")).row(t, "shop")
		if row["TYPE"] != "LoadBalancer" || row["EXTERNAL-IP"] == "<pending>" || row["EXTERNAL-IP"] == "" {
			return fmt.Errorf("row %v", row)
		}
		ip = row["EXTERNAL-IP"]
		return nil
	})
	addr, err := netip.ParseAddr(ip)
	if err != nil || !pool.Contains(addr) {
		t.Fatalf("EXTERNAL-IP %q is not an address of the pool %s", ip, pool)
	}
	if fin := k.jsonpath("svc/shop", "{.metadata.finalizers}"); !strings.Contains(fin, servicelb.Finalizer) {
		t.Errorf("finalizers %s, want %s", fin, servicelb.Finalizer)
	}
	expectContains(t, "kubectl get events", k.ok("get", "events", "--field-selector", "involvedObject.name=shop"),
		"EnsuringLoadBalancer", "EnsuredLoadBalancer")

	url := "http://" + net.JoinHostPort(ip, "80") + "/"
	pods := k.currentPods()
	if len(pods) != 2 {
		t.Fatalf("pods %v, want 2", pods)
	}
	until(t, "an answer at the load-balancer address", func() error { _, err := httpGet(url); return err })
	expectEveryPodAnswers(t, "through the load-balancer address", url, pods)

	// kubectl waits for the finalizer: by the time it returns the address is released.
	k.ok("delete", "svc", "shop", "--timeout=30s")
	k.expectNotFound("svc/shop")
	until(t, "the address to stop answering", func() error {
		if _, err := httpGet(url); err == nil {
			return fmt.Errorf("%s still answers", url)
		}
		return nil
	})
	k.okIn(lbApp, "apply", "-f", "-")
	k.eventually("svc/shop", "{.status.loadBalancer.ingress[0].ip}", ip, 10*time.Second)
	until(t, "an answer at the address given again", func() error { _, err := httpGet(url); return err })
}
