package persistentvolume_test

import (
	"context"
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

// startControllers runs the binder and both protection controllers until the test ends. Tests
// do not run in parallel: each has its own controllers, and volumes are cluster-wide.
func startControllers(t *testing.T) {
	t.Helper()
	testserver.StartControllers(t, c, persistentvolume.Entry, protection.PVCEntry, protection.PVEntry)
}

var ctx = context.Background()

func pvAPI() *client.Typed[*corev1.PersistentVolume] {
	return client.Resource[*corev1.PersistentVolume](c, "persistentvolumes")
}

func pvcAPI(ns string) *client.Typed[*corev1.PersistentVolumeClaim] {
	return client.Resource[*corev1.PersistentVolumeClaim](c, "persistentvolumeclaims").Namespace(ns)
}

func podAPI(ns string) *client.Typed[*corev1.Pod] {
	return client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
}

func createVolume(t *testing.T, name, size string, policy corev1.PersistentVolumeReclaimPolicy, mutate ...func(*corev1.PersistentVolume)) {
	t.Helper()
	v := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: policy,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
	}
	for _, m := range mutate {
		m(v)
	}
	if _, err := pvAPI().Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Drop the finalizers so nothing outlives the test.
		if cur, err := pvAPI().Get(ctx, name); err == nil {
			cur.Finalizers = nil
			_, _ = pvAPI().Update(ctx, cur)
		}
		_ = pvAPI().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

func createClaim(t *testing.T, ns, name, size, class string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := pvcAPI(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: &class,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClaim(ns, name) })
	return pvc
}

// deleteClaim removes a claim for good, so that a claim left Pending by one test cannot bind
// the volumes of the next.
func deleteClaim(ns, name string) {
	if cur, err := pvcAPI(ns).Get(ctx, name); err == nil {
		cur.Finalizers = nil
		_, _ = pvcAPI(ns).Update(ctx, cur)
	}
	_ = pvcAPI(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

func createClass(t *testing.T, name, provisioner string, mode storagev1.VolumeBindingMode) {
	t.Helper()
	_, err := client.Resource[*storagev1.StorageClass](c, "storageclasses").Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.Resource[*storagev1.StorageClass](c, "storageclasses").Delete(ctx, name, metav1.DeleteOptions{})
	})
}

func volumeIs(t *testing.T, name string, cond func(*corev1.PersistentVolume) bool) func() bool {
	return func() bool {
		v, err := pvAPI().Get(ctx, name)
		return err == nil && cond(v)
	}
}

func volumePhase(t *testing.T, name string, phase corev1.PersistentVolumePhase) {
	t.Helper()
	testserver.Eventually(t, "volume "+name+" "+string(phase), wait, volumeIs(t, name, func(v *corev1.PersistentVolume) bool { return v.Status.Phase == phase }))
}

func claimPhase(t *testing.T, ns, name string, phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
	t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	testserver.Eventually(t, "claim "+name+" "+string(phase), wait, func() bool {
		var err error
		pvc, err = pvcAPI(ns).Get(ctx, name)
		return err == nil && pvc.Status.Phase == phase
	})
	return pvc
}

func gone[T client.Object](t *testing.T, api *client.Typed[T], name string) {
	t.Helper()
	testserver.Eventually(t, name+" deleted", wait, func() bool {
		_, err := api.Get(ctx, name)
		return client.IsNotFound(err)
	})
}

// hasEvent waits for an event about the object named name with reason and message.
func hasEvent(t *testing.T, ns, name, reason, message string) {
	t.Helper()
	testserver.Eventually(t, "event "+reason+" on "+name, wait, func() bool {
		list, err := client.Resource[*corev1.Event](c, "events").Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Reason == reason && strings.Contains(e.Message, message) {
				return true
			}
		}
		return false
	})
}

func podUsing(ns, name, claim, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
}

// TestBindReleaseProtect follows a volume through its life: bound to the claim that fits,
// kept while a pod uses the claim and while the claim is bound, released when the claim goes.
func TestBindReleaseProtect(t *testing.T) {
	startControllers(t)
	ns := testserver.Namespace(t, c, "bind-")
	big, small := ns+"-big", ns+"-small"
	createVolume(t, big, "10Gi", corev1.PersistentVolumeReclaimRetain)
	createVolume(t, small, "1Gi", corev1.PersistentVolumeReclaimRetain)
	// Both volumes seen by the binder (Available) before the claim, or it might take the one it saw.
	volumePhase(t, big, corev1.VolumeAvailable)
	volumePhase(t, small, corev1.VolumeAvailable)
	createClaim(t, ns, "data", "500Mi", "")

	pvc := claimPhase(t, ns, "data", corev1.ClaimBound)
	q := pvc.Status.Capacity[corev1.ResourceStorage]
	if pvc.Spec.VolumeName != small || q.String() != "1Gi" || pv.AccessModesString(pvc.Status.AccessModes) != "RWO" ||
		pvc.Annotations[pv.AnnBindCompleted] != "yes" || pvc.Annotations[pv.AnnBoundByController] != "yes" {
		t.Fatalf("claim bound as %+v %+v %v", pvc.Spec, pvc.Status, pvc.Annotations)
	}
	volumePhase(t, small, corev1.VolumeBound)
	volumePhase(t, big, corev1.VolumeAvailable)
	v, _ := pvAPI().Get(ctx, small)
	if ref := v.Spec.ClaimRef; ref == nil || ref.Name != "data" || ref.Namespace != ns || ref.UID != pvc.UID {
		t.Fatalf("volume claimRef %+v", v.Spec.ClaimRef)
	}

	// A pod on a node uses the claim: deleting the claim waits for the pod.
	if _, err := podAPI(ns).Create(ctx, podUsing(ns, "user", "data", "node-1")); err != nil {
		t.Fatal(err)
	}
	if err := pvcAPI(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The volume is bound: deleting it waits for the claim.
	if err := pvAPI().Delete(ctx, small, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if pvc, err := pvcAPI(ns).Get(ctx, "data"); err != nil || pvc.DeletionTimestamp == nil {
		t.Fatalf("claim in use should be kept while being deleted: %v %v", pvc, err)
	}
	if v, err := pvAPI().Get(ctx, small); err != nil || v.DeletionTimestamp == nil {
		t.Fatalf("bound volume should be kept while being deleted: %v", err)
	}

	if err := podAPI(ns).Delete(ctx, "user", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	gone(t, pvcAPI(ns), "data")
	// The claim is gone: the volume is released, no longer in use, and its deletion completes.
	gone(t, pvAPI(), small)
}

// TestRetainedVolumeIsReleased checks Retain: the volume stays, Released, with its claimRef.
func TestRetainedVolumeIsReleased(t *testing.T) {
	startControllers(t)
	ns := testserver.Namespace(t, c, "retain-")
	name := ns + "-pv"
	createVolume(t, name, "1Gi", corev1.PersistentVolumeReclaimRetain)
	createClaim(t, ns, "data", "1Gi", "")
	claimPhase(t, ns, "data", corev1.ClaimBound)
	if err := pvcAPI(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	volumePhase(t, name, corev1.VolumeReleased)
	if v, _ := pvAPI().Get(ctx, name); v.Spec.ClaimRef == nil || v.Spec.ClaimRef.Name != "data" {
		t.Errorf("a retained volume keeps its claimRef: %+v", v.Spec.ClaimRef)
	}
}

// TestClaimsThatCannotBind checks the Pending claims and their events.
func TestClaimsThatCannotBind(t *testing.T) {
	startControllers(t)
	ns := testserver.Namespace(t, c, "pending-")
	wffc := ns + "-wffc"
	createClass(t, wffc, "example.com/local", storagev1.VolumeBindingWaitForFirstConsumer)

	createClaim(t, ns, "nothing", "1Gi", "")
	hasEvent(t, ns, "nothing", "FailedBinding", "no persistent volumes available for this claim and no storage class is set")
	createClaim(t, ns, "later", "1Gi", wffc)
	hasEvent(t, ns, "later", "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
	if _, err := podAPI(ns).Create(ctx, podUsing(ns, "web", "later", "")); err != nil {
		t.Fatal(err)
	}
	hasEvent(t, ns, "later", "WaitForPodScheduled", "waiting for pod web to be scheduled")

	// A claim for a named volume that is too small.
	tiny := ns + "-tiny"
	createVolume(t, tiny, "10Mi", corev1.PersistentVolumeReclaimRetain)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "named"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: tiny, StorageClassName: new(""),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := pvcAPI(ns).Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClaim(ns, "named") })
	hasEvent(t, ns, "named", "VolumeMismatch", `Cannot bind to requested volume "`+tiny+`": requested PV is too small`)

	// The selected node makes a waiting claim ask its provisioner.
	later, err := pvcAPI(ns).Get(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&later.ObjectMeta, pv.AnnSelectedNode, "node-1")
	if _, err := pvcAPI(ns).Update(ctx, later); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, "provisioner annotation", wait, func() bool {
		pvc, err := pvcAPI(ns).Get(ctx, "later")
		return err == nil && pvc.Annotations[pv.AnnStorageProvisioner] == "example.com/local"
	})
	hasEvent(t, ns, "later", "ExternalProvisioning", "Waiting for a volume to be created either by the external provisioner 'example.com/local'")
	for _, name := range []string{"nothing", "later", "named"} {
		if pvc, _ := pvcAPI(ns).Get(ctx, name); pvc.Status.Phase != corev1.ClaimPending {
			t.Errorf("claim %s is %s, want Pending", name, pvc.Status.Phase)
		}
	}
}

// TestExternallyProvisioned plays an external provisioner: the claim asks it through its
// annotation, the volume it creates pre-bound is bound, and on release it is left to it.
func TestExternallyProvisioned(t *testing.T) {
	startControllers(t)
	ns := testserver.Namespace(t, c, "external-")
	class := ns + "-ext"
	createClass(t, class, "example.com/disk", storagev1.VolumeBindingImmediate)
	pvc := createClaim(t, ns, "data", "2Gi", class)
	testserver.Eventually(t, "provisioner annotation", wait, func() bool {
		cur, err := pvcAPI(ns).Get(ctx, "data")
		return err == nil && cur.Annotations[pv.AnnStorageProvisioner] == "example.com/disk"
	})
	name := "pvc-" + string(pvc.UID)
	createVolume(t, name, "2Gi", corev1.PersistentVolumeReclaimDelete, func(v *corev1.PersistentVolume) {
		v.Spec.StorageClassName = class
		v.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "data", UID: pvc.UID}
		v.Annotations = map[string]string{pv.AnnDynamicallyProvisioned: "example.com/disk"}
	})
	if got := claimPhase(t, ns, "data", corev1.ClaimBound); got.Spec.VolumeName != name {
		t.Fatalf("claim bound to %q, want %q", got.Spec.VolumeName, name)
	}
	if err := pvcAPI(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	volumePhase(t, name, corev1.VolumeReleased)
	time.Sleep(200 * time.Millisecond)
	if v, err := pvAPI().Get(ctx, name); err != nil || v.DeletionTimestamp != nil {
		t.Errorf("the binder must leave an external provisioner's volume to it: %v %v", v, err)
	}
}

// TestRecycle checks the recycler pod: made for a released Recycle volume with its path and
// node affinity; its success makes the volume Available, its failure Failed with an event.
func TestRecycle(t *testing.T) {
	startControllers(t)
	ns := testserver.Namespace(t, c, "recycle-")
	name := ns + "-pv"
	createVolume(t, name, "1Gi", corev1.PersistentVolumeReclaimRecycle, func(v *corev1.PersistentVolume) {
		v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}}}}}}
	})
	recycler := "recycler-for-" + name
	finish := func(phase corev1.PodPhase, message string) {
		t.Helper()
		var pod *corev1.Pod
		testserver.Eventually(t, "recycler pod", wait, func() bool {
			var err error
			pod, err = podAPI("default").Get(ctx, recycler)
			return err == nil && pod.DeletionTimestamp == nil
		})
		if pod.Spec.Volumes[0].HostPath.Path != "/tmp/"+name || pod.Spec.Containers[0].VolumeMounts[0].MountPath != "/scrub" ||
			pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "node-1" {
			t.Fatalf("recycler pod %+v", pod.Spec)
		}
		pod.Status.Phase, pod.Status.Message = phase, message
		if _, err := podAPI("default").UpdateStatus(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	cycle := func(claim string) {
		t.Helper()
		createClaim(t, ns, claim, "1Gi", "")
		claimPhase(t, ns, claim, corev1.ClaimBound)
		if err := pvcAPI(ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cycle("first")
	finish(corev1.PodSucceeded, "")
	volumePhase(t, name, corev1.VolumeAvailable)
	if v, _ := pvAPI().Get(ctx, name); v.Spec.ClaimRef != nil {
		t.Errorf("a recycled volume is free: claimRef %+v", v.Spec.ClaimRef)
	}
	hasEvent(t, "default", name, "VolumeRecycled", "Volume recycled")
	gone(t, podAPI("default"), recycler)

	cycle("second")
	finish(corev1.PodFailed, "cannot remove /scrub/x")
	volumePhase(t, name, corev1.VolumeFailed)
	hasEvent(t, "default", name, "VolumeFailedRecycle", "Recycle failed: failed to recycle volume: cannot remove /scrub/x")
	if v, _ := pvAPI().Get(ctx, name); v.Status.Message != "Recycle failed: failed to recycle volume: cannot remove /scrub/x" {
		t.Errorf("failed volume message %q", v.Status.Message)
	}
}
