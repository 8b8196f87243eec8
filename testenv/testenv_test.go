package testenv_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/testenv"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func TestCRDsFromDirectoryAndClientGo(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.WithCRDs("testdata/crds"), testenv.WithWebhookConfigs("testdata/webhooks"), testenv.WithCRDObjects(convertedCRD()))
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	// Start returned: the CRD is served at once, no retry needed.
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"size": int64(3)},
	}}
	created, err := dyn.Resource(widgets).Namespace("default").Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["spec"] = map[string]any{"size": int64(4)}
	if _, err := dyn.Resource(widgets).Namespace("default").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := dyn.Resource(widgets).Namespace("default").Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 4 {
		t.Errorf("size %d after update, want 4", size)
	}
	// The schema of the file holds.
	bad := w.DeepCopy()
	bad.SetName("w2")
	bad.Object["spec"] = map[string]any{"size": int64(-1)}
	if _, err := dyn.Resource(widgets).Namespace("default").Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create with size -1: %v, want Invalid", err)
	}
	if err := dyn.Resource(widgets).Namespace("default").Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The second document of the file, cluster-scoped.
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list gadgets: %v", err)
	}
	// The webhook configurations, their Service references pointed at env.WebhookServer.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	pointed := func(kind string, cc admissionregistrationv1.WebhookClientConfig, path string) {
		t.Helper()
		want := "https://" + env.WebhookServer.Addr() + path
		if cc.Service != nil || cc.URL == nil || *cc.URL != want || !bytes.Equal(cc.CABundle, env.WebhookServer.CAData) {
			t.Errorf("%s webhook client config %+v, want url %s and the server's CA", kind, cc, want)
		}
	}
	if v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "validating-widgets", metav1.GetOptions{}); err != nil {
		t.Errorf("validating webhook configuration: %v", err)
	} else {
		pointed("validating", v.Webhooks[0].ClientConfig, "/validate-example-com-v1-widget")
	}
	if m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "mutating-widgets", metav1.GetOptions{}); err != nil {
		t.Errorf("mutating webhook configuration: %v", err)
	} else {
		pointed("mutating", m.Webhooks[0].ClientConfig, "/mutate-example-com-v1-widget")
	}
	// A CRD's conversion webhook that names a Service is pointed there too.
	crdsGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if crd, err := dyn.Resource(crdsGVR).Get(ctx, "converts.conv.example.com", metav1.GetOptions{}); err != nil {
		t.Errorf("CRD with a conversion webhook: %v", err)
	} else {
		cc, _, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig")
		want := "https://" + env.WebhookServer.Addr() + "/convert"
		if cc["service"] != nil || cc["url"] != want || cc["caBundle"] != base64.StdEncoding.EncodeToString(env.WebhookServer.CAData) {
			t.Errorf("conversion webhook client config %v, want url %s and the server's CA", cc, want)
		}
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(env.WebhookServer.CertDir, f)); err != nil {
			t.Errorf("webhook server certificate: %v", err)
		}
	}
}

func TestKubectl(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.WithCRDObjects(gizmoCRD()), testenv.WithoutControllers())
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("/usr/bin/kubectl", append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl("apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g1}\nspec: {color: red}\n", "apply", "-f", "-")
	if out := kubectl("", "get", "gizmos", "g1", "-o", "jsonpath={.spec.color}"); out != "red" {
		t.Errorf("kubectl get gizmo: %q, want red", out)
	}
	if out := kubectl("", "get", "crd", "-o", "name"); !strings.Contains(out, "gizmos.example.com") {
		t.Errorf("kubectl get crd: %q", out)
	}
}

func gizmoCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gizmos", Kind: "Gizmo"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(true)}}}},
		},
	}
}

// WithControllers runs the controllers it names, by their names or aliases, and no other:
// the service-account controller gives a new namespace its default ServiceAccount, which the
// default controllers never do.
func TestWithControllers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		opts []testenv.Option
		want bool
	}{
		{[]testenv.Option{testenv.WithControllers("serviceaccount-controller")}, true},
		{nil, false},
	} {
		env := testenv.Start(t, tc.opts...)
		cs := kubernetes.NewForConfigOrDie(env.Config)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		made := func() bool {
			_, err := cs.CoreV1().ServiceAccounts("fresh").Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		}
		if tc.want {
			testserver.Eventually(t, "the default ServiceAccount", 15*time.Second, made)
			continue
		}
		// An absence shows only over time: half a second, several times what the
		// service-account controller above takes.
		time.Sleep(500 * time.Millisecond)
		if made() {
			t.Error("the default controllers made a ServiceAccount")
		}
	}
}

// The default controllers: a namespace's deletion completes, and an owned object goes with
// its owner.
func TestNamespaceDeletionAndGarbageCollection(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner, err := cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if _, err := cs.CoreV1().ConfigMaps("doomed").Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("doomed").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the dependent ConfigMap collected", 15*time.Second, func() bool {
		_, err := cs.CoreV1().ConfigMaps("doomed").Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the namespace deleted", 15*time.Second, func() bool {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends the goroutine, as
// the real one does, so that a test can check how Start fails.
type fatalRecorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalRecorder) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fatalRecorder) Helper() {}

// startFailure runs Start with opts on a recorder and returns its failure ("" if it started).
func startFailure(t *testing.T, opts ...testenv.Option) string {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Start(rec, opts...)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.failed
}

func TestBadInputFailsNamingTheCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []testenv.Option
		want []string
	}{
		{"conflicting controller options", []testenv.Option{testenv.WithoutControllers(), testenv.WithControllers("namespace")}, []string{"WithoutControllers conflicts with WithControllers"}},
		{"unknown controller", []testenv.Option{testenv.WithControllers("namespace", "no-such")}, []string{"WithControllers", `"no-such"`}},
		{"zero timeout", []testenv.Option{testenv.WithTimeout(0)}, []string{"WithTimeout(0s)"}},
		{"nil log writer", []testenv.Option{testenv.WithLogs(nil)}, []string{"WithLogs: a nil writer"}},
		{"missing directory", []testenv.Option{testenv.WithCRDs("testdata/no-such-dir")}, []string{"WithCRDs", "testdata/no-such-dir", "no such file"}},
		{"unparseable file", []testenv.Option{testenv.WithCRDs("testdata/unparseable")}, []string{"testdata/unparseable/broken.yaml", "document 1"}},
		// The server's refusal, with the file's name.
		{"invalid CRD", []testenv.Option{testenv.WithCRDs("testdata/invalid")}, []string{"testdata/invalid/nogroup.yaml (document 1)", "spec.group"}},
		{"invalid CRD object", []testenv.Option{testenv.WithCRDObjects(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "bad"}})}, []string{"WithCRDObjects bad", "Invalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := startFailure(t, tc.opts...)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("failure %q does not contain %q", got, w)
				}
			}
		})
	}
}

// 20 instances at once, each with its own etcd, port and data: each writes and reads its own
// object, and sees none of the others'.
func TestManyInParallel(t *testing.T) {
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			startOwnInstance(t, i)
		})
	}
}

// startOwnInstance starts an Env in which it writes a ConfigMap of its own, and checks that
// the Env holds that one and no other instance's.
func startOwnInstance(t *testing.T, i int) *testenv.Env {
	env := testenv.Start(t, testenv.WithoutControllers())
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	name := fmt.Sprint("instance-", i)
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "instance-") {
			names = append(names, cm.Name)
		}
	}
	if len(names) != 1 || names[0] != name {
		t.Errorf("ConfigMaps %v, want only %s", names, name)
	}
	return env
}

// Stopped, an Env leaves no goroutine and no file behind. Not parallel: it counts the
// goroutines of the whole test binary.
func TestStopLeavesNothingBehind(t *testing.T) {
	before := runtime.NumGoroutine()
	var dir string
	t.Run("env", func(t *testing.T) {
		env := testenv.Start(t, testenv.WithCRDs("testdata/crds"), testenv.WithScheduler())
		dir = env.Dir
		cs := kubernetes.NewForConfigOrDie(env.Config)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// client-go keeps its connections: a user closes them, or they end with the server.
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir %s after the test: %v, want it removed", dir, err)
	}
	checkGoroutines(t, before)
}

// New and Stop, with every role and a pod running: Stop ends the pod's process and every
// goroutine, and removes the data dir (New's own, not a test's).
func TestNewAndStopLeaveNothingBehind(t *testing.T) {
	before := runtime.NumGoroutine()
	env, err := testenv.New(testenv.WithControllers("*"), testenv.WithScheduler(), testenv.WithNode())
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	marker := fmt.Sprint("testenv-stop-", os.Getpid(), "-", time.Now().UnixNano())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sleeper"}, Spec: corev1.PodSpec{AutomountServiceAccountToken: new(false),
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"/bin/sh", "-c", "sleep 60; : " + marker}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the pod running", 15*time.Second, func() bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	if !processRuns(marker) {
		t.Fatal("the pod's process is not found")
	}
	if err := env.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("data dir %s after Stop: %v, want it removed", env.Dir, err)
	}
	if processRuns(marker) {
		t.Error("the pod's process outlived Stop")
	}
	http.DefaultClient.CloseIdleConnections()
	checkGoroutines(t, before)
}

// processRuns reports whether a process of this machine has marker in its command line.
func processRuns(marker string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), marker) {
			return true
		}
	}
	return false
}

// checkGoroutines waits (10 s at most) until no more goroutines run than before.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	var now int
	deadline := time.Now().Add(10 * time.Second)
	for now = runtime.NumGoroutine(); now > before && time.Now().Before(deadline); now = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	if now > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before Start, %d after the Env stopped:\n%s", before, now, buf[:runtime.Stack(buf, true)])
	}
}

// With the scheduler and the node agent, a pod runs (as a process of this machine) and its
// deletion completes.
func TestSchedulerAndNode(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.WithScheduler(), testenv.WithNode())
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	// No service-account token: the default controllers do not make the namespace's
	// ServiceAccount (WithControllers("*") does).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sleeper"}, Spec: corev1.PodSpec{AutomountServiceAccountToken: new(false),
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"/bin/sh", "-c", "sleep 60"}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the pod running", 15*time.Second, func() bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	if err := cs.CoreV1().Pods("default").Delete(ctx, "sleeper", metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))}); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "the pod gone", 15*time.Second, func() bool {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// convertedCRD is a CRD of two versions converted by a webhook named by a Service, as
// kubebuilder's webhook_in_<kind> patch names it.
func convertedCRD() *apiextensionsv1.CustomResourceDefinition {
	anything := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}}
	path := "/convert"
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "converts.conv.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "conv.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "converts", Singular: "convert", Kind: "Convert", ListKind: "ConvertList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: anything},
				{Name: "v2", Served: true, Schema: anything},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig:             &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "system", Name: "webhook-service", Path: &path}},
				ConversionReviewVersions: []string{"v1"},
			}},
		},
	}
}
