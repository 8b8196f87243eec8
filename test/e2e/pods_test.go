//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// podFeatures are the objects of TestUpPods: a pod reading a ConfigMap and a Secret at their
// mount paths, a claim of the default StorageClass, and a pod that runs kubectl in-cluster.
const podFeatures = `
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret}
stringData: {token: s3cret}
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  containers:
  - name: main
    image: sh
    command: [/bin/sh, -c, 'while :; do echo "$(cat /etc/app/config/greeting) $(cat /etc/app/secret/token)"; sleep 0.2; done']
    volumeMounts:
    - {name: config, mountPath: /etc/app/config}
    - {name: secret, mountPath: /etc/app/secret}
  volumes:
  - {name: config, configMap: {name: app-config}}
  - {name: secret, secret: {secretName: app-secret}}
`

// claim asks the default StorageClass (local-path) for a volume.
const claim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`

// claimPod is a pod using the claim data: it runs script with the claim at /data.
func claimPod(name, script string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: sh
    command: [/bin/sh, -c, %q]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
`, name, script)
}

// inCluster runs kubectl as a pod's command with no kubeconfig: it finds the API through the
// kubernetes service's variables and authenticates with the pod's service-account token.
const inCluster = `
apiVersion: v1
kind: Pod
metadata: {name: in-cluster}
spec:
  restartPolicy: Never
  containers:
  - name: kubectl
    image: kubectl
    command: [kubectl, get, pods, -o, name]
`

// web is kplane's echo server behind a Service, for port-forward.
const web = `
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - name: echo
    image: kplane/echo
    command: [kplane, echo, --port=8080]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /, port: http}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
`

// portForward starts kubectl port-forward to target's remote port on a free local port and
// returns that address; kubectl ends with the test.
func (k kc) portForward(target, remote string) string {
	k.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, env.kubectl, "--kubeconfig", k.kubeconfig, "port-forward", target, ":"+remote)
	cmd.Env = env.kubectlEnv
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		k.t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	forwarding := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> \d+$`)
	for lines.Scan() {
		if m := forwarding.FindStringSubmatch(lines.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return "127.0.0.1:" + m[1]
		}
	}
	k.t.Fatalf("kubectl port-forward %s: %s", target, stderr.String())
	return ""
}

// get is the body of an HTTP GET of url.
func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// TestUpPods runs `kplane up` and checks what a pod gets from its node with real kubectl:
// ConfigMap and Secret files at their mount paths, updated in place; exec, cp and
// port-forward; kubectl running in-cluster with the pod's own identity; kubectl top; a claim
// provisioned by the local-path class whose data outlives the pod that wrote it and goes
// with the claim.
func TestUpPods(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })

	k.okIn(podFeatures, "apply", "-f", "-")
	logs := func(pod, want string) func() error {
		return func() error {
			r := k.run("", "logs", pod)
			if r.err != nil || !strings.Contains(r.stdout, want) {
				return fmt.Errorf("logs of %s lack %q:\n%s", pod, want, r)
			}
			return nil
		}
	}
	until(t, "the reader seeing its files", logs("reader", "hello s3cret"))
	k.ok("patch", "configmap", "app-config", "-p", `{"data":{"greeting":"bonjour"}}`)
	until(t, "the reader seeing the update", logs("reader", "bonjour s3cret"))

	// exec runs in the container's mount namespace, env and working directory; cp is tar
	// through exec, both ways.
	if out := k.ok("exec", "reader", "--", "sh", "-c", "cat /etc/app/config/greeting; echo; echo $POD_NAME"); out != "bonjour\nreader\n" {
		t.Errorf("exec: %q", out)
	}
	if r := k.run("", "exec", "reader", "--", "sh", "-c", "exit 7"); r.err == nil || !strings.Contains(r.stderr, "command terminated with exit code 7") {
		t.Errorf("exec exit 7: %s", r)
	}
	local := filepath.Join(t.TempDir(), "local.txt")
	if err := os.WriteFile(local, []byte("copied in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k.ok("cp", local, "reader:copied.txt")
	if out := k.ok("exec", "reader", "--", "cat", "copied.txt"); out != "copied in\n" {
		t.Errorf("kubectl cp into the pod: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back")
	k.ok("exec", "reader", "--", "sh", "-c", "cat /etc/app/secret/token > out.txt")
	k.ok("cp", "reader:out.txt", back)
	if data, err := os.ReadFile(back); err != nil || string(data) != "s3cret" {
		t.Errorf("kubectl cp out of the pod: %q, %v", data, err)
	}

	// port-forward to the pod and to its Service, with HTTP through each.
	k.okIn(web, "apply", "-f", "-")
	until(t, "web Ready", func() error {
		if ready := k.jsonpath("pod/web", `{.status.conditions[?(@.type=="Ready")].status}`); ready != "True" {
			return fmt.Errorf("web Ready=%q", ready)
		}
		return nil
	})
	for _, target := range []string{"pod/web", "svc/web"} {
		remote := "8080"
		if target == "svc/web" {
			remote = "80"
		}
		addr := k.portForward(target, remote)
		for range 3 { // a new connection each time, on the same session
			if body, err := get("http://" + addr + "/"); err != nil || !strings.Contains(body, "web") {
				t.Errorf("GET through port-forward %s: %q, %v", target, body, err)
			}
		}
	}

	k.okIn(inCluster, "apply", "-f", "-")
	until(t, "kubectl in a pod listing pods", logs("in-cluster", "pod/reader"))

	// Resource usage, from the node through metrics.k8s.io, with nothing else installed.
	until(t, "kubectl top", func() error {
		nodes, pods := k.run("", "top", "nodes"), k.run("", "top", "pods")
		if nodes.err != nil || pods.err != nil || !strings.Contains(nodes.stdout, "CPU(cores)") || !strings.Contains(pods.stdout, "reader") {
			return fmt.Errorf("%s\n%s", nodes, pods)
		}
		return nil
	})

	// The claim waits for its first consumer, then is provisioned on the node.
	k.okIn(claim+"---"+claimPod("writer", "echo persisted > /data/file"), "apply", "-f", "-")
	until(t, "the writer done", func() error {
		if phase := k.jsonpath("pod/writer", "{.status.phase}"); phase != "Succeeded" {
			return fmt.Errorf("writer %s", phase)
		}
		return nil
	})
	pv := k.jsonpath("pvc/data", "{.spec.volumeName}")
	if pv == "" {
		t.Fatal("the claim has no volume")
	}
	k.ok("delete", "pod", "writer")
	k.okIn(claimPod("again", "cat /data/file"), "apply", "-f", "-")
	until(t, "the data read back by a new pod", logs("again", "persisted"))
	k.ok("delete", "pod", "again")
	k.ok("delete", "pvc", "data")
	until(t, "the volume deleted with its claim (reclaim policy Delete)", func() error {
		if r := k.run("", "get", "pv", pv); r.err == nil {
			return fmt.Errorf("pv %s still there", pv)
		}
		return nil
	})
}
