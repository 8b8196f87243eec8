//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// httpsKubeconfig writes a kubeconfig for the shared server over TLS (the port that serves
// plain HTTP answers TLS too), trusting the data dir's certificate. kubectl sends bearer tokens
// only over TLS, so `--token` needs it.
func httpsKubeconfig(t *testing.T) string {
	t.Helper()
	server := strings.Replace(env.serverURL, "http://", "https://", 1)
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: tls\n  cluster: {server: " + server +
		", certificate-authority: " + filepath.Join(env.dataDir, "tls.crt") + "}\n" +
		"users:\n- name: nobody\n  user: {}\ncontexts:\n- name: tls\n  context: {cluster: tls, user: nobody}\ncurrent-context: tls\n"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// claimsOf decodes the payload of a JWT without checking it.
func claimsOf(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCreateToken: `kubectl create token` with its options against the TokenRequest API, the
// token used with `kubectl --token` (kubectl auth whoami, a list), and the errors kubectl shows.
func TestCreateToken(t *testing.T) {
	t.Parallel()
	k := newNamespace(t)
	// The token's holder talks TLS; creating tokens works on either.
	holder := kc{t: t, ns: k.ns, kubeconfig: httpsKubeconfig(t)}
	k.ok("create", "serviceaccount", "robot")
	token := strings.TrimSpace(k.ok("create", "token", "robot"))
	c := claimsOf(t, token)
	if c["sub"] != "system:serviceaccount:"+k.ns+":robot" || c["exp"].(float64)-c["iat"].(float64) != 3600 {
		t.Errorf("claims %v", c)
	}
	who := holder.ok("--token", token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	expectContains(t, "auth whoami", who, "system:serviceaccount:"+k.ns+":robot", "system:serviceaccounts:"+k.ns, "system:authenticated")
	holder.ok("--token", token, "get", "serviceaccounts")

	other := strings.TrimSpace(k.ok("create", "token", "robot", "--audience", "vault", "--duration", "20m"))
	c = claimsOf(t, other)
	if aud, _ := c["aud"].([]any); len(aud) != 1 || aud[0] != "vault" || c["exp"].(float64)-c["iat"].(float64) != 1200 {
		t.Errorf("--audience vault --duration 20m: %v", c)
	}
	r := holder.fail("--token", other, "get", "serviceaccounts")
	expectContains(t, "a token for another audience", r.stderr, "Unauthorized")

	k.okIn(`apiVersion: v1
kind: Pod
metadata: {name: worker}
spec:
  serviceAccountName: robot
  containers: [{name: c, image: busybox}]
`, "apply", "-f", "-")
	bound := strings.TrimSpace(k.ok("create", "token", "robot", "--bound-object-kind", "Pod", "--bound-object-name", "worker"))
	pod, _ := claimsOf(t, bound)["kubernetes.io"].(map[string]any)["pod"].(map[string]any)
	if pod["name"] != "worker" || pod["uid"] != k.jsonpath("pod/worker", "{.metadata.uid}") {
		t.Errorf("pod claim %v", pod)
	}
	holder.ok("--token", bound, "get", "pods")

	r = k.fail("create", "token", "nobody")
	expectContains(t, "token of a missing account", r.stderr, `serviceaccounts "nobody" not found`)
	r = k.fail("create", "token", "robot", "--bound-object-kind", "Pod", "--bound-object-name", "gone")
	expectContains(t, "token bound to a missing pod", r.stderr, `pods "gone" not found`)
	r = k.fail("create", "token", "robot", "--duration", "5m")
	expectContains(t, "too short a token", r.stderr, "may not specify a duration less than 10 minutes")
	r = holder.fail("--token", "not-a-token", "get", "pods")
	expectContains(t, "a request with a bad token", r.stderr, "Unauthorized")
}

// TestUpInClusterClient: under `kplane up` a client set up exactly as client-go's
// rest.InClusterConfig sets one up in a pod — https://<kubernetes ClusterIP>:443, the token of a
// service account read from a file, the CA from the namespace's kube-root-ca.crt — reaches the
// API through the proxy and the kubernetes service, over TLS, as that account.
func TestUpInClusterClient(t *testing.T) {
	dir := t.TempDir()
	startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	until(t, "the kubeconfig", func() error { _, err := os.Stat(kubeconfig); return err })
	k := kc{t: t, kubeconfig: kubeconfig}
	// The controller manager makes both for each namespace.
	var ca string
	until(t, "kube-root-ca.crt in default", func() error {
		r := k.run("", "get", "configmap", "kube-root-ca.crt", "-o", `jsonpath={.data.ca\.crt}`)
		ca = r.stdout
		if r.err == nil && !strings.Contains(ca, "BEGIN CERTIFICATE") {
			return fmt.Errorf("ca.crt %q", ca)
		}
		return r.err
	})
	until(t, "the default service account", func() error { return k.run("", "get", "serviceaccount", "default").err })
	token := strings.TrimSpace(k.ok("create", "token", "default"))
	mount := t.TempDir() // what a pod sees at /var/run/secrets/kubernetes.io/serviceaccount
	for name, data := range map[string]string{"token": token, "ca.crt": ca, "namespace": "default"} {
		if err := os.WriteFile(filepath.Join(mount, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ip := k.jsonpath("service/kubernetes", "{.spec.clusterIP}")
	port := k.jsonpath("service/kubernetes", "{.spec.ports[0].port}")
	if port != "443" || !strings.HasPrefix(ip, "127.64.") {
		t.Fatalf("kubernetes service at %s:%s", ip, port)
	}
	// rest.InClusterConfig, with its environment and files in the test's hands.
	cfg := &rest.Config{
		Host:            "https://" + net.JoinHostPort(ip, port),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(mount, "ca.crt")},
		BearerTokenFile: filepath.Join(mount, "token"),
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	until(t, "pods listed through the kubernetes service", func() error {
		_, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		return err
	})
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || who.Status.UserInfo.Username != "system:serviceaccount:default:default" {
		t.Errorf("in-cluster whoami: %+v %v", who, err)
	}
	// A token the server did not issue is refused on this path too.
	if err := os.WriteFile(filepath.Join(mount, "token"), []byte("forged"), 0o600); err != nil {
		t.Fatal(err)
	}
	cs, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("a forged token: %v, want 401", err)
	}
}
