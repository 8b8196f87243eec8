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
// mount paths.
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
// ConfigMap and Secret files at their mount paths, updated in place, and kubectl running
// in-cluster with the pod's own identity.
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

}
