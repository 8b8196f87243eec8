package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "b-$(A)", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "a"},
		{"x$(A)y$(A)", "xaya"},
		{"$(B)", "b-$(A)"}, // values are not expanded again
		{"$(EMPTY)!", "!"},
		{"$(UNKNOWN)", "$(UNKNOWN)"},
		{"$$(A)", "$(A)"},
		{"$$$(A)", "$a"},
		{"$$", "$"},
		{"$$$", "$$"},
		{"$A $", "$A $"},
		{"$(A", "$(A"},
		{"$(A$$", "$(A$"},
		{"$()", "$()"},
		{"$(A)$(", "a$("},
		{"ü$(A)ü", "üaü"},
	} {
		if got := expand(tc.in, lookup); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPodField(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u-1",
			Labels: map[string]string{"app": "web", "a.b/c": "d"}, Annotations: map[string]string{"note": "hi"}},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "sa"},
	}
	for _, tc := range []struct{ path, want string }{
		{"metadata.name", "web"},
		{"metadata.namespace", "ns"},
		{"metadata.uid", "u-1"},
		{"metadata.labels['app']", "web"},
		{"metadata.labels['a.b/c']", "d"},
		{"metadata.labels['none']", ""},
		{"metadata.annotations['note']", "hi"},
		{"spec.nodeName", "n1"},
		{"spec.serviceAccountName", "sa"},
		{"status.podIP", "10.1.2.3"},
		{"status.podIPs", "10.1.2.3"},
		{"status.hostIP", hostIP},
		{"status.hostIPs", hostIP},
		{"spec.hostname", "error"},
		{"metadata.labels", "error"},
	} {
		got, err := podField(pod, "10.1.2.3", tc.path)
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("podField(%s) = %q (%v), want %q", tc.path, got, err, tc.want)
		}
	}
}

// fakeObjects serves ConfigMaps and Secrets from maps, NotFound for others, and Services by
// namespace.
type fakeObjects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
	svcs    map[string][]*corev1.Service
}

func (f fakeObjects) servicesIn(_ context.Context, ns string) ([]*corev1.Service, error) {
	return f.svcs[ns], nil
}

func (f fakeObjects) configMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.cms[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (f fakeObjects) secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

// testNode is the node the tests' containers run on, for limits they do not set.
var testNode = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}

func resourceRef(res, divisor string) *corev1.EnvVarSource {
	ref := &corev1.ResourceFieldSelector{Resource: res}
	if divisor != "" {
		ref.Divisor = resource.MustParse(divisor)
	}
	return &corev1.EnvVarSource{ResourceFieldRef: ref}
}

// afterPodVars renders an environment as "K=V K=V", without POD_IP, POD_NAME and POD_NAMESPACE.
func afterPodVars(vars *envVars) string {
	var out []string
	for _, k := range vars.names[3:] {
		out = append(out, k+"="+vars.values[k])
	}
	return strings.Join(out, " ")
}

func TestResolveEnv(t *testing.T) {
	src := fakeObjects{
		cms:     map[string]*corev1.ConfigMap{"cfg": {Data: map[string]string{"mode": "fast", "level": "3"}}},
		secrets: map[string]*corev1.Secret{"pw": {Data: map[string][]byte{"password": []byte("s3cret")}}},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}}
	yes := new(true)
	cmKey := func(name, key string, optional *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
	}
	secretKey := func(name, key string, optional *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
	}
	for _, tc := range []struct {
		name    string
		spec    corev1.Container
		want    string // "K=V K=V" after POD_IP, POD_NAME, POD_NAMESPACE; or "error: ..."
		wantErr string
	}{
		{name: "values and references",
			spec: corev1.Container{Env: []corev1.EnvVar{
				{Name: "A", Value: "1"}, {Name: "B", Value: "$(A)-$(C)-$(POD_NAME)"}, {Name: "C", Value: "3"}, {Name: "A", Value: "$(A)$(A)"}}},
			want: "A=11 B=1-$(C)-web C=3"},
		{name: "override pod vars",
			spec: corev1.Container{Env: []corev1.EnvVar{{Name: "POD_NAME", Value: "x"}, {Name: "N", Value: "$(POD_NAME)"}}},
			want: "N=x"},
		{name: "keys and fields",
			spec: corev1.Container{Env: []corev1.EnvVar{
				{Name: "MODE", ValueFrom: cmKey("cfg", "mode", nil)},
				{Name: "PW", ValueFrom: secretKey("pw", "password", nil)},
				{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "OPT", ValueFrom: cmKey("absent", "x", yes)},
				{Name: "OPTKEY", ValueFrom: secretKey("pw", "absent", yes)},
				{Name: "REF", Value: "$(MODE)/$(OPT)"}}},
			want: "MODE=fast PW=s3cret NS=ns REF=fast/$(OPT)"},
		{name: "envFrom with prefix, env after wins",
			spec: corev1.Container{
				EnvFrom: []corev1.EnvFromSource{
					{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "pw"}}},
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: yes}}},
				Env: []corev1.EnvVar{{Name: "CFG_mode", Value: "slow"}, {Name: "X", Value: "$(CFG_level)"}}},
			want: "CFG_level=3 CFG_mode=slow password=s3cret X=3"},
		{name: "resources",
			spec: corev1.Container{Name: "web", Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
				Env: []corev1.EnvVar{
					{Name: "MEM_MI", ValueFrom: resourceRef("limits.memory", "1Mi")},
					{Name: "CPU_M", ValueFrom: resourceRef("requests.cpu", "1m")},
					{Name: "CPU", ValueFrom: resourceRef("requests.cpu", "")},     // rounded up
					{Name: "CPU_MAX", ValueFrom: resourceRef("limits.cpu", "")}}}, // no limit: the node's
			want: "MEM_MI=300 CPU_M=250 CPU=1 CPU_MAX=4"},
		{name: "unknown resource", spec: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: resourceRef("limits.gpu", "")}}},
			wantErr: `env X: unsupported container resource "limits.gpu"`},
		{name: "missing configmap", spec: corev1.Container{Env: []corev1.EnvVar{{Name: "M", ValueFrom: cmKey("absent", "mode", nil)}}},
			wantErr: `configmap "absent" not found`},
		{name: "missing key", spec: corev1.Container{Env: []corev1.EnvVar{{Name: "M", ValueFrom: cmKey("cfg", "absent", nil)}}},
			wantErr: "couldn't find key absent in ConfigMap ns/cfg"},
		{name: "missing secret key", spec: corev1.Container{Env: []corev1.EnvVar{{Name: "M", ValueFrom: secretKey("pw", "absent", nil)}}},
			wantErr: "couldn't find key absent in Secret ns/pw"},
		{name: "missing envFrom secret", spec: corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}}}},
			wantErr: `secret "absent" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars, err := resolveEnv(context.Background(), src, pod, "10.0.0.9", tc.spec, testNode)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := afterPodVars(vars); got != tc.want {
				t.Errorf("env %q, want %q", got, tc.want)
			}
			if vars.names[0] != "POD_IP" || vars.values["POD_IP"] != "10.0.0.9" || vars.values["POD_NAMESPACE"] != "ns" {
				t.Errorf("pod vars %v", vars.values)
			}
		})
	}
}

func service(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

// TestServiceEnv: the service variables the kubelet sets: the kubernetes service's always, the
// pod's namespace's unless enableServiceLinks is false; the container's own env wins and may
// refer to them.
func TestServiceEnv(t *testing.T) {
	src := fakeObjects{svcs: map[string][]*corev1.Service{
		"default": {
			service("default", "kubernetes", "10.96.0.1", corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}),
			service("default", "other", "10.96.0.9", corev1.ServicePort{Port: 80}),
		},
		"ns": {
			service("ns", "web-db", "10.96.3.4", corev1.ServicePort{Name: "sql", Port: 5432}, corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP}),
			service("ns", "headless", corev1.ClusterIPNone, corev1.ServicePort{Port: 80}),
		},
	}}
	kubernetes := "KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 KUBERNETES_SERVICE_PORT_HTTPS=443 " +
		"KUBERNETES_PORT=tcp://10.96.0.1:443 KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443 KUBERNETES_PORT_443_TCP_PROTO=tcp " +
		"KUBERNETES_PORT_443_TCP_PORT=443 KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1"
	webDB := "WEB_DB_SERVICE_HOST=10.96.3.4 WEB_DB_SERVICE_PORT=5432 WEB_DB_SERVICE_PORT_SQL=5432 WEB_DB_SERVICE_PORT_DNS_UDP=53 " +
		"WEB_DB_PORT=tcp://10.96.3.4:5432 WEB_DB_PORT_5432_TCP=tcp://10.96.3.4:5432 WEB_DB_PORT_5432_TCP_PROTO=tcp " +
		"WEB_DB_PORT_5432_TCP_PORT=5432 WEB_DB_PORT_5432_TCP_ADDR=10.96.3.4 WEB_DB_PORT_53_UDP=udp://10.96.3.4:53 " +
		"WEB_DB_PORT_53_UDP_PROTO=udp WEB_DB_PORT_53_UDP_PORT=53 WEB_DB_PORT_53_UDP_ADDR=10.96.3.4"
	for _, tc := range []struct {
		name  string
		ns    string
		links *bool
		env   []corev1.EnvVar
		want  string
	}{
		{name: "links on (the default)", ns: "ns", want: kubernetes + " " + webDB},
		{name: "links off", ns: "ns", links: new(false), want: kubernetes},
		{name: "in default", ns: "default", want: kubernetes + " OTHER_SERVICE_HOST=10.96.0.9 OTHER_SERVICE_PORT=80 OTHER_PORT=tcp://10.96.0.9:80 " +
			"OTHER_PORT_80_TCP=tcp://10.96.0.9:80 OTHER_PORT_80_TCP_PROTO=tcp OTHER_PORT_80_TCP_PORT=80 OTHER_PORT_80_TCP_ADDR=10.96.0.9"},
		{name: "the container's own env first, referring to them", ns: "ns", links: new(false),
			env:  []corev1.EnvVar{{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}, {Name: "KUBERNETES_SERVICE_PORT", Value: "6443"}},
			want: "API=https://10.96.0.1:443 KUBERNETES_SERVICE_PORT=6443 " + strings.Replace(kubernetes, "KUBERNETES_SERVICE_PORT=443 ", "", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: tc.ns}, Spec: corev1.PodSpec{EnableServiceLinks: tc.links}}
			vars, err := resolveEnv(context.Background(), src, pod, "10.1.1.1", corev1.Container{Env: tc.env}, testNode)
			if err != nil {
				t.Fatal(err)
			}
			if got := afterPodVars(vars); got != tc.want {
				t.Errorf("env\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestEnvFromObjects runs pods whose env comes from a ConfigMap and a Secret; a pod whose
// ConfigMap is missing waits with CreateContainerConfigError and starts once it exists.
func TestEnvFromObjects(t *testing.T) {
	c := newClient(t)
	a := startAgent(t, c, "node-env", "127.83.0.0/24")
	ns := testserver.Namespace(t, c, "node-env-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"mode": "fast", "level": "3"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource[*corev1.Secret](c, "secrets").Namespace(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pw"}, Data: map[string][]byte{"password": []byte("s3cret")}}); err != nil {
		t.Fatal(err)
	}
	envPod := func(name, cm string) *corev1.Pod {
		p := shPod(ns, name, "node-env", "env > $HOME/env.txt; echo $(MODE) >> $HOME/env.txt; sleep 100", corev1.RestartPolicyAlways)
		p.Labels = map[string]string{"app": "env"}
		ctr := &p.Spec.Containers[0]
		ctr.EnvFrom = []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
		ctr.Env = append(ctr.Env,
			corev1.EnvVar{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: "mode"}}},
			corev1.EnvVar{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "pw"}, Key: "password"}}},
			corev1.EnvVar{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			corev1.EnvVar{Name: "MSG", Value: "$(GREETING) $(MODE) $$(MODE)"})
		return p
	}
	checkEnv := func(name, mode string) {
		t.Helper()
		p, err := pods.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(ContainerDir(a.o.DataDir, p.UID, "main"), "env.txt")
		var env string
		eventually(t, name+" env.txt", func() (bool, string) {
			b, _ := os.ReadFile(path)
			env = string(b)
			return strings.HasSuffix(env, mode+"\n"), env // the $(MODE) line of the script, written last
		})
		for _, want := range []string{"MODE=" + mode, "PW=s3cret", "APP=env", "CFG_level=3", "CFG_mode=" + mode,
			"MSG=hi " + mode + " $(MODE)", "POD_NAME=" + name, "POD_NAMESPACE=" + ns,
			"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"} {
			if !strings.Contains(env, "\n"+want+"\n") && !strings.HasPrefix(env, want+"\n") {
				t.Errorf("%s: env lacks %s:\n%s", name, want, env)
			}
		}
	}

	if _, err := pods.Create(ctx, envPod("ok", "cfg")); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, envPod("later", "cfg-later")); err != nil {
		t.Fatal(err)
	}
	checkEnv("ok", "fast")

	eventually(t, "CreateContainerConfigError", func() (bool, string) {
		p, err := pods.Get(ctx, "later")
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != "CreateContainerConfigError" {
			return false, fmt.Sprintf("%+v", cs)
		}
		if msg := cs[0].State.Waiting.Message; msg != `configmap "cfg-later" not found` {
			t.Errorf("waiting message %q", msg)
		}
		if cs[0].RestartCount != 0 || p.Status.Phase != corev1.PodPending {
			t.Errorf("restarts %d, phase %s", cs[0].RestartCount, p.Status.Phase)
		}
		return true, ""
	})
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg-later"}, Data: map[string]string{"mode": "slow", "level": "3"}}); err != nil {
		t.Fatal(err)
	}
	checkEnv("later", "slow")
}

// TestPodEvents: the agent records Started for a started container, Failed and BackOff for
// a container that cannot start, and Killing for a deleted pod's container, as the kubelet.
func TestPodEvents(t *testing.T) {
	c := newClient(t)
	startAgent(t, c, "node-events", "127.84.0.0/24")
	ns := testserver.Namespace(t, c, "node-events-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	ok, err := pods.Create(ctx, shPod(ns, "ok", "node-events", "sleep 100", corev1.RestartPolicyAlways))
	if err != nil {
		t.Fatal(err)
	}
	bad := shPod(ns, "bad", "node-events", "", corev1.RestartPolicyAlways)
	bad.Spec.Containers[0].Command = []string{"/nonexistent/program"}
	if bad, err = pods.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // "pod reason" → message prefix
		"ok Started":  "Started container main",
		"bad Failed":  "Error: ",
		"bad BackOff": "Back-off restarting failed container main",
	}
	uids := map[string]types.UID{"ok": ok.UID, "bad": bad.UID}
	typeOf := map[string]string{"Started": corev1.EventTypeNormal, "Failed": corev1.EventTypeWarning, "BackOff": corev1.EventTypeWarning}
	eventually(t, "events", func() (bool, string) {
		evs, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			key := e.InvolvedObject.Name + " " + e.Reason
			seen = append(seen, key+": "+e.Message)
			prefix, ok := want[key]
			if !ok || !strings.HasPrefix(e.Message, prefix) {
				continue
			}
			if e.Source.Component != "kubelet" || e.Type != typeOf[e.Reason] || e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.UID != uids[e.InvolvedObject.Name] {
				t.Errorf("event %+v", e)
			}
			delete(want, key)
		}
		return len(want) == 0, fmt.Sprintf("missing %v; seen %v", want, seen)
	})
	// The missing program is also in the pod's status: waiting to run again, the failed start
	// as its last state, as the kubelet reports it.
	eventually(t, "bad's status", func() (bool, string) {
		p, err := pods.Get(ctx, "bad")
		if err != nil {
			return false, err.Error()
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprintf("%+v", p.Status)
		}
		cs := p.Status.ContainerStatuses[0]
		last := cs.LastTerminationState.Terminated
		ok := cs.State.Waiting != nil && cs.State.Waiting.Reason == "RunContainerError" &&
			strings.Contains(cs.State.Waiting.Message, "/nonexistent/program") &&
			last != nil && last.Reason == "StartError" && last.ExitCode == 128 && cs.RestartCount >= 1 && !cs.Ready
		return ok, fmt.Sprintf("%+v", cs)
	})
	if err := pods.Delete(ctx, "ok", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want["ok Killing"] = "Stopping container main"
	typeOf["Killing"] = corev1.EventTypeNormal
	eventually(t, "Killing event", func() (bool, string) {
		evs, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.UID == ok.UID && e.Reason == "Killing" {
				return e.Message == want["ok Killing"] && e.Type == typeOf["Killing"], fmt.Sprintf("%+v", e)
			}
		}
		return false, "none"
	})
}

func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b"
	for _, tc := range []struct {
		name, hostname, want string
	}{
		{"web-1", "", "web-1"},
		{"job-0-x1", "job-0", "job-0"},
		{long, "", strings.Repeat("a", 62)}, // cut to 63, no trailing dash
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: corev1.PodSpec{Hostname: tc.hostname}}
		if got := podHostname(pod); got != tc.want {
			t.Errorf("%q/%q: %q, want %q", tc.name, tc.hostname, got, tc.want)
		}
	}
}
