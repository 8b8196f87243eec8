package localpath

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/volume/persistentvolume"
	"github.com/kplane/kplane/controller/volume/protection"
	"github.com/kplane/kplane/internal/pv"
	"github.com/kplane/kplane/internal/testserver"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var c *client.Client

func TestMain(m *testing.M) {
	testserver.Main(m, func(_ *testserver.Server, cl *client.Client) { c = cl })
}

const wait = 10 * time.Second

var ctx = context.Background()

func classes() *client.Typed[*storagev1.StorageClass] {
	return client.Resource[*storagev1.StorageClass](c, "storageclasses")
}
func volumes() *client.Typed[*corev1.PersistentVolume] {
	return client.Resource[*corev1.PersistentVolume](c, "persistentvolumes")
}
func claims(ns string) *client.Typed[*corev1.PersistentVolumeClaim] {
	return client.Resource[*corev1.PersistentVolumeClaim](c, "persistentvolumeclaims").Namespace(ns)
}

// start runs a provisioner for node until the test ends and returns its directory.
func start(t *testing.T, node string) string {
	t.Helper()
	dir := t.TempDir()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- New(c, node, dir).Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("provisioner of %s: %v", node, err)
		}
	})
	return dir
}

// startControllers runs the binder and both protection controllers until the test ends. Tests
// do not run in parallel: each has its own controllers, and volumes are cluster-wide.
func startControllers(t *testing.T) {
	t.Helper()
	testserver.StartControllers(t, c, persistentvolume.Entry, protection.PVCEntry, protection.PVEntry)
}

func newClass(t *testing.T, name string, policy corev1.PersistentVolumeReclaimPolicy, mode storagev1.VolumeBindingMode) {
	t.Helper()
	_, err := classes().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: ProvisionerName,
		ReclaimPolicy: &policy, VolumeBindingMode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classes().Delete(ctx, name, metav1.DeleteOptions{}) })
}

func newClaim(t *testing.T, ns, name, class string, annotations map[string]string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := claims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
			StorageClassName: &class,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testserver.Eventually(t, what, wait, cond)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestDefaultClass checks the class a provisioner makes, and that it never replaces one.
func TestDefaultClass(t *testing.T) {
	if err := classes().Delete(ctx, ClassName, metav1.DeleteOptions{}); err != nil && !client.IsNotFound(err) {
		t.Fatal(err)
	}
	mine := DefaultClass()
	mine.Provisioner = "example.com/mine"
	mine.Annotations = nil
	if _, err := classes().Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	start(t, "node-class")
	time.Sleep(300 * time.Millisecond)
	if got, err := classes().Get(ctx, ClassName); err != nil || got.Provisioner != "example.com/mine" {
		t.Fatalf("an existing class must be kept: %v %v", got, err)
	}
	if err := classes().Delete(ctx, ClassName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start(t, "node-class-2")
	eventually(t, "the default class", func() bool {
		sc, err := classes().Get(ctx, ClassName)
		return err == nil && sc.Provisioner == ProvisionerName && pv.IsDefaultClass(sc) &&
			*sc.ReclaimPolicy == corev1.PersistentVolumeReclaimDelete && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
	})
}

// TestProvisionAndDelete runs two nodes' provisioners with the binder: a claim whose first pod
// goes to node-a gets a directory there and a volume bound to it; deleting the claim removes
// both.
func TestProvisionAndDelete(t *testing.T) {
	startControllers(t)
	dirA, dirB := start(t, "node-a"), start(t, "node-b")
	ns := testserver.Namespace(t, c, "localpath-")
	class := ns + "-local"
	newClass(t, class, corev1.PersistentVolumeReclaimDelete, storagev1.VolumeBindingWaitForFirstConsumer)

	pvc := newClaim(t, ns, "data", class, nil)
	time.Sleep(200 * time.Millisecond)
	if _, err := volumes().Get(ctx, VolumeName(pvc)); !client.IsNotFound(err) {
		t.Fatalf("provisioned before a node was selected: %v", err)
	}
	// The scheduler picks node-a for the claim's first pod.
	pvc, _ = claims(ns).Get(ctx, "data")
	metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, pv.AnnSelectedNode, "node-a")
	if _, err := claims(ns).Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "claim bound", func() bool {
		cur, err := claims(ns).Get(ctx, "data")
		return err == nil && cur.Status.Phase == corev1.ClaimBound && cur.Spec.VolumeName == VolumeName(pvc)
	})
	v, err := volumes().Get(ctx, VolumeName(pvc))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dirA, v.Name)
	q := v.Spec.Capacity[corev1.ResourceStorage]
	switch {
	case v.Spec.HostPath == nil || v.Spec.HostPath.Path != path || *v.Spec.HostPath.Type != corev1.HostPathDirectoryOrCreate:
		t.Errorf("hostPath %+v, want %s", v.Spec.HostPath, path)
	case !onNode(v, "node-a") || onNode(v, "node-b"):
		t.Errorf("node affinity %+v", v.Spec.NodeAffinity)
	case q.String() != "64Mi" || pv.AccessModesString(v.Spec.AccessModes) != "RWO" || v.Spec.StorageClassName != class:
		t.Errorf("capacity %s, modes %v, class %s", q.String(), v.Spec.AccessModes, v.Spec.StorageClassName)
	case v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete:
		t.Errorf("reclaim policy %s", v.Spec.PersistentVolumeReclaimPolicy)
	case v.Annotations[pv.AnnDynamicallyProvisioned] != ProvisionerName || !slices.Contains(v.Finalizers, pv.ProvisionerFinalizer):
		t.Errorf("annotations %v finalizers %v", v.Annotations, v.Finalizers)
	case v.Spec.ClaimRef == nil || v.Spec.ClaimRef.UID != pvc.UID:
		t.Errorf("claimRef %+v", v.Spec.ClaimRef)
	}
	if !exists(path) {
		t.Fatalf("directory %s missing", path)
	}
	if entries, _ := os.ReadDir(dirB); len(entries) > 0 {
		t.Errorf("node-b provisioned too: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(path, "file"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := claims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "volume deleted", func() bool {
		_, err := volumes().Get(ctx, v.Name)
		return client.IsNotFound(err)
	})
	if exists(path) {
		t.Errorf("directory %s survived its volume", path)
	}
}

// TestRetainAndManualDelete checks a class with Retain: the released volume and its data stay;
// deleting the volume by hand removes the volume but keeps the data.
func TestRetainAndManualDelete(t *testing.T) {
	startControllers(t)
	dir := start(t, "node-r")
	ns := testserver.Namespace(t, c, "retain-")
	class := ns + "-keep"
	newClass(t, class, corev1.PersistentVolumeReclaimRetain, storagev1.VolumeBindingWaitForFirstConsumer)
	pvc := newClaim(t, ns, "data", class, map[string]string{pv.AnnSelectedNode: "node-r"})
	eventually(t, "claim bound", func() bool {
		cur, err := claims(ns).Get(ctx, "data")
		return err == nil && cur.Status.Phase == corev1.ClaimBound
	})
	path := filepath.Join(dir, VolumeName(pvc))
	if err := claims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "volume released", func() bool {
		v, err := volumes().Get(ctx, VolumeName(pvc))
		return err == nil && v.Status.Phase == corev1.VolumeReleased
	})
	time.Sleep(200 * time.Millisecond)
	if !exists(path) {
		t.Fatalf("a retained volume's data is gone")
	}
	if err := volumes().Delete(ctx, VolumeName(pvc), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "volume deleted", func() bool {
		_, err := volumes().Get(ctx, VolumeName(pvc))
		return client.IsNotFound(err)
	})
	if !exists(path) {
		t.Errorf("deleting a retained volume removed its data")
	}
}

// TestImmediateClass checks a class that does not wait for a pod: no node, no volume, an event.
func TestImmediateClass(t *testing.T) {
	startControllers(t)
	start(t, "node-i")
	ns := testserver.Namespace(t, c, "immediate-")
	class := ns + "-now"
	newClass(t, class, corev1.PersistentVolumeReclaimDelete, storagev1.VolumeBindingImmediate)
	newClaim(t, ns, "data", class, nil)
	eventually(t, "ProvisioningFailed event", func() bool {
		list, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=data"})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, "no node was specified") {
				return true
			}
		}
		return false
	})
}

func TestSkip(t *testing.T) {
	ours := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "lp"}, Provisioner: ProvisionerName}
	other := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Provisioner: "example.com/x"}
	claim := func(ann map[string]string, volume string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}}
	}
	asked := map[string]string{pv.AnnStorageProvisioner: ProvisionerName, pv.AnnSelectedNode: "n1"}
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		class *storagev1.StorageClass
		want  string
	}{
		{"ours on this node", claim(asked, ""), ours, ""},
		{"another node", claim(map[string]string{pv.AnnStorageProvisioner: ProvisionerName, pv.AnnSelectedNode: "n2"}, ""), ours, "another node"},
		{"no node", claim(map[string]string{pv.AnnStorageProvisioner: ProvisionerName}, ""), ours, errNoNode},
		{"not asked yet", claim(map[string]string{pv.AnnSelectedNode: "n1"}, ""), ours, "not asked"},
		{"another provisioner's class", claim(asked, ""), other, "not our class"},
		{"bound", claim(asked, "pv-1"), ours, "bound or going"},
	} {
		if got := skip(tc.claim, tc.class, "n1"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestReclaimFor(t *testing.T) {
	claimObj := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u"},
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	class := DefaultClass()
	base := volumeFor(claimObj, class, "n1", "/var/lp/pvc-u")
	with := func(f func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		v := base.DeepCopy()
		f(v)
		return v
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		v    *corev1.PersistentVolume
		want reclaimAction
	}{
		{"bound", with(func(v *corev1.PersistentVolume) { v.Status.Phase = corev1.VolumeBound }), leave},
		{"released under Delete", with(func(v *corev1.PersistentVolume) { v.Status.Phase = corev1.VolumeReleased }), deleteVolume},
		{"released under Retain", with(func(v *corev1.PersistentVolume) {
			v.Status.Phase, v.Spec.PersistentVolumeReclaimPolicy = corev1.VolumeReleased, corev1.PersistentVolumeReclaimRetain
		}), leave},
		{"deleted, released", with(func(v *corev1.PersistentVolume) { v.Status.Phase, v.DeletionTimestamp = corev1.VolumeReleased, &now }), release},
		{"deleted while bound waits", with(func(v *corev1.PersistentVolume) { v.Status.Phase, v.DeletionTimestamp = corev1.VolumeBound, &now }), leave},
		{"another node's", with(func(v *corev1.PersistentVolume) {
			v.Status.Phase, v.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = corev1.VolumeReleased, []string{"n2"}
		}), leave},
		{"outside the directory", with(func(v *corev1.PersistentVolume) {
			v.Status.Phase, v.Spec.HostPath.Path = corev1.VolumeReleased, "/etc"
		}), leave},
		{"another provisioner's", with(func(v *corev1.PersistentVolume) {
			v.Status.Phase, v.Annotations[pv.AnnDynamicallyProvisioned] = corev1.VolumeReleased, "example.com/x"
		}), leave},
	} {
		if got := reclaimFor(tc.v, "n1", "/var/lp"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
