//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
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

// TestUpPods runs `kplane up` and checks what a pod gets from its node with real kubectl:
// ConfigMap and Secret files at their mount paths, updated in place; kubectl running
// in-cluster with the pod's own identity; kubectl top; a claim provisioned by the local-path
// class whose data outlives the pod that wrote it and goes with the claim.
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
