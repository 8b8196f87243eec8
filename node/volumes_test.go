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
	"github.com/kplane/kplane/node/mountns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// logText is the text a container has logged so far (its log's records without their
// time and stream).
func logText(dir string, uid, container string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "pods", uid, container, LogFile))
	var out strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if _, _, tag, text, ok := parseLogRecord([]byte(line)); ok {
			out.Write(text)
			if tag == 'F' {
				out.WriteByte('\n')
			}
		}
	}
	return out.String()
}

// waitLog waits until the container's log contains every want.
func waitLog(t *testing.T, a *Agent, pods *client.Typed[*corev1.Pod], name, container string, want ...string) string {
	t.Helper()
	var text string
	eventually(t, name+"/"+container+" log", func() (bool, string) {
		p, err := pods.Get(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		text = logText(a.o.DataDir, string(p.UID), container)
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false, fmt.Sprintf("log %q lacks %q; status %+v", text, w, p.Status)
			}
		}
		return true, ""
	})
	return text
}

func TestVolumes(t *testing.T) {
	if !mountns.Privileged() {
		t.Skip("the node tests run the agent as root")
	}
	c := newClient(t)
	a := startAgent(t, c, "node-vol", "127.94.0.0/24")
	ns := testserver.Namespace(t, c, "node-vol-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	cms := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"greeting": "hello", "other": "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource[*corev1.Secret](c, "secrets").Namespace(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"password": []byte("s3cret")}}); err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "from-host"), []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	mode := int32(0o600)
	// One pod with every kind of volume; its script prints what it sees, then follows the
	// ConfigMap's greeting.
	script := `cat /etc/config/greeting; echo; cat /etc/one/hi; echo; stat -L -c '%a' /etc/one/hi; cat /etc/secret/password; echo;
cat /etc/podinfo/labels; echo; cat /etc/podinfo/name; echo; cat /etc/all/greeting /etc/all/name; echo;
cat /host/from-host; echo; cat /sub/file 2>/dev/null || echo no-sub-file; touch /etc/config/x 2>/dev/null || echo config-read-only;
touch /ro/x 2>/dev/null || echo ro-read-only; stat -f -c '%T' /mem; echo shared > /cache/note;
while :; do echo "greeting=$(cat /etc/config/greeting)"; sleep 0.1; done`
	pod := shPod(ns, "vols", "node-vol", script, corev1.RestartPolicyAlways)
	pod.Labels = map[string]string{"app": "vols"}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "one", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items: []corev1.KeyToPath{{Key: "greeting", Path: "hi", Mode: &mode}}}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "greeting", Path: "greeting"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: new(corev1.HostPathDirectory)}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "config", MountPath: "/etc/config"}, {Name: "one", MountPath: "/etc/one"}, {Name: "secret", MountPath: "/etc/secret"},
		{Name: "podinfo", MountPath: "/etc/podinfo"}, {Name: "all", MountPath: "/etc/all"}, {Name: "host", MountPath: "/host"},
		{Name: "host", MountPath: "/sub", SubPath: "made-by-subpath"}, {Name: "host", MountPath: "/ro", ReadOnly: true},
		{Name: "cache", MountPath: "/cache"}, {Name: "mem", MountPath: "/mem"},
	}
	// A second container shares the emptyDir.
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "reader", Image: "sh",
		Command:      []string{"/bin/sh", "-c", `until [ -e /shared/note ]; do sleep 0.05; done; cat /shared/note; sleep 100`},
		VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/shared"}}})
	if _, err := pods.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitLog(t, a, pods, "vols", "main", "hello\nhello\n600\ns3cret\napp=\"vols\"\nvols\nhellovols\nhost file\nno-sub-file\nconfig-read-only\nro-read-only\ntmpfs\n", "greeting=hello")
	waitLog(t, a, pods, "vols", "reader", "shared\n")
	if _, err := os.Stat(filepath.Join(hostDir, "made-by-subpath")); err != nil {
		t.Errorf("subPath not created in the volume: %v", err)
	}
	for _, p := range []string{"/etc/config", "/etc/one", "/host", "/cache", "/mem"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists on the host: %v", p, err)
		}
	}

	// An update of the ConfigMap reaches the running container.
	cm, err := cms.Get(ctx, "cfg")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "bonjour"
	if _, err := cms.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	waitLog(t, a, pods, "vols", "main", "greeting=bonjour")
}

// TestVolumeErrors: a missing ConfigMap keeps the pod ContainerCreating with a FailedMount
// event until it exists; a hostPath of type Directory that does not exist does too; an
// optional missing Secret is an empty volume.
func TestVolumeErrors(t *testing.T) {
	if !mountns.Privileged() {
		t.Skip("the node tests run the agent as root")
	}
	c := newClient(t)
	a := startAgent(t, c, "node-volerr", "127.95.0.0/24")
	ns := testserver.Namespace(t, c, "node-volerr-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)

	late := shPod(ns, "late", "node-volerr", "cat /cfg/k; sleep 100", corev1.RestartPolicyAlways)
	late.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}}}}}
	late.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}

	noDir := shPod(ns, "nodir", "node-volerr", "sleep 100", corev1.RestartPolicyAlways)
	noDir.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: filepath.Join(t.TempDir(), "missing"), Type: new(corev1.HostPathDirectory)}}}}
	noDir.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "h", MountPath: "/h"}}

	optional := shPod(ns, "optional", "node-volerr", "ls -A /s | wc -l; sleep 100", corev1.RestartPolicyAlways)
	optional.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "none", Optional: new(true)}}}}
	optional.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "s", MountPath: "/s"}}

	// A mount path under a regular file cannot be made: the container waits, saying why,
	// and never runs without its volume.
	underFile := shPod(ns, "underfile", "node-volerr", "sleep 100", corev1.RestartPolicyAlways)
	underFile.Spec.Volumes = []corev1.Volume{{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	underFile.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "e", MountPath: "/etc/hostname/data"}}

	for _, p := range []*corev1.Pod{late, noDir, optional, underFile} {
		if _, err := pods.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		"late":  `MountVolume.SetUp failed for volume "cfg" : configmap "later" not found`,
		"nodir": `MountVolume.SetUp failed for volume "h" : hostPath type check failed`,
	} {
		eventually(t, name+" FailedMount", func() (bool, string) {
			p, err := pods.Get(ctx, name)
			if err != nil {
				return false, err.Error()
			}
			w := p.Status.ContainerStatuses
			if p.Status.Phase != corev1.PodPending || len(w) != 1 || w[0].State.Waiting == nil || w[0].State.Waiting.Reason != "ContainerCreating" {
				return false, fmt.Sprintf("%+v", p.Status)
			}
			return hasEvent(ctx, c, ns, name, "FailedMount", want)
		})
	}
	eventually(t, "underfile CreateContainerConfigError", func() (bool, string) {
		p, err := pods.Get(ctx, "underfile")
		if err != nil {
			return false, err.Error()
		}
		w := p.Status.ContainerStatuses
		if p.Status.Phase != corev1.PodPending || len(w) != 1 || w[0].State.Waiting == nil || w[0].State.Waiting.Reason != "CreateContainerConfigError" ||
			!strings.Contains(w[0].State.Waiting.Message, "/etc/hostname") {
			return false, fmt.Sprintf("%+v", p.Status)
		}
		return hasEvent(ctx, c, ns, "underfile", "Failed", "/etc/hostname")
	})
	waitLog(t, a, pods, "optional", "main", "2\n") // ..data and the directory it names: no files
	if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "later"}, Data: map[string]string{"k": "now"}}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, a, pods, "late", "main", "now")
}

// hasEvent reports whether the pod has an event with the reason whose message contains want.
func hasEvent(ctx context.Context, c *client.Client, ns, pod, reason, want string) (bool, string) {
	events, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, e := range events.Items {
		if e.InvolvedObject.Name == pod && e.Reason == reason {
			if strings.Contains(e.Message, want) {
				return true, ""
			}
			seen = append(seen, e.Message)
		}
	}
	return false, fmt.Sprintf("events %s: %q", reason, seen)
}

// TestServiceAccountVolume: a pod as the API admits it gets the kube-api-access volume; the
// agent fills it with a token bound to the pod (TokenRequest), ca.crt from kube-root-ca.crt
// and the namespace, and the container has the kubernetes service's variables. Before the
// service account exists, the pod waits in ContainerCreating.
func TestServiceAccountVolume(t *testing.T) {
	if !mountns.Privileged() {
		t.Skip("the node tests run the agent as root")
	}
	c := newClient(t)
	a := startAgent(t, c, "node-sa", "127.96.0.0/24")
	ns := testserver.Namespace(t, c, "node-sa-")
	ctx := context.Background()
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	if _, err := client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "the CA"}}); err != nil {
		t.Fatal(err)
	}
	dir := "/var/run/secrets/kubernetes.io/serviceaccount"
	pod := shPod(ns, "sa", "node-sa", `cat `+dir+`/ca.crt; echo; cat `+dir+`/namespace; echo; cut -c1-3 `+dir+`/token; echo "host=$KUBERNETES_SERVICE_HOST"; sleep 100`, corev1.RestartPolicyAlways)
	pod.Spec.AutomountServiceAccountToken = nil
	if _, err := pods.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sa waiting for its service account", func() (bool, string) {
		return hasEvent(ctx, c, ns, "sa", "FailedMount", `serviceaccounts "default" not found`)
	})
	if _, err := client.Resource[*corev1.ServiceAccount](c, "serviceaccounts").Namespace(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	svc, err := client.Resource[*corev1.Service](c, "services").Namespace("default").Get(ctx, "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	// A JWT's header, base64url of `{"`, starts with eyJ.
	waitLog(t, a, pods, "sa", "main", "the CA\n"+ns+"\neyJ\nhost="+svc.Spec.ClusterIP+"\n")
}
