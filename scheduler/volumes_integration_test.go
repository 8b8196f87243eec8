package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/volume/persistentvolume"
	"github.com/kplane/kplane/internal/testserver"
	"github.com/kplane/kplane/node/localpath"
	"github.com/kplane/kplane/scheduler"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSchedulingWithVolumes runs the scheduler with the binder and two nodes' local-path
// provisioners: pods wait for their claims, go where their volumes are, and make their
// WaitForFirstConsumer claims bind or provision on the node chosen.
func TestSchedulingWithVolumes(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	ns := testserver.Namespace(t, c, "volumes-")
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	claims := client.Resource[*corev1.PersistentVolumeClaim](c, "persistentvolumeclaims").Namespace(ns)
	volumes := client.Resource[*corev1.PersistentVolume](c, "persistentvolumes")

	nodeA, nodeB := ns+"-a", ns+"-b"
	dirs := map[string]string{}
	for _, n := range []string{nodeA, nodeB} {
		createNode(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelHostname: n}}}, corev1.ConditionTrue)
		dirs[n] = t.TempDir()
	}

	// The scheduler, the binder and the provisioners, until the test ends.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 4)
	o := scheduler.DefaultOptions()
	o.LeaderElect = false
	go func() { done <- scheduler.RunWithClient(runCtx, o, c) }()
	for n, dir := range dirs {
		go func() { done <- localpath.New(c, n, dir).Run(runCtx) }()
	}
	testserver.StartControllers(t, c, persistentvolume.Entry)
	t.Cleanup(func() {
		stop()
		for range 3 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})

	local, static := ns+"-local", ns+"-static"
	for name, provisioner := range map[string]string{local: localpath.ProvisionerName, static: "kubernetes.io/no-provisioner"} {
		mode := storagev1.VolumeBindingWaitForFirstConsumer
		if _, err := client.Resource[*storagev1.StorageClass](c, "storageclasses").Create(ctx, &storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = client.Resource[*storagev1.StorageClass](c, "storageclasses").Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	claim := func(name, class string) {
		t.Helper()
		if _, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}); err != nil {
			t.Fatal(err)
		}
	}
	volumeOn := func(name, class, node string) {
		t.Helper()
		if _, err := volumes.Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	podUsing := func(name, claim string) {
		t.Helper()
		if _, err := pods.Create(ctx, newPod(name, func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		})); err != nil {
			t.Fatal(err)
		}
	}
	onNode := func(pod string, nodes ...string) string {
		t.Helper()
		var got string
		eventually(t, pod+" scheduled", func() string {
			p, err := pods.Get(ctx, pod)
			if err != nil {
				return err.Error()
			}
			got = p.Spec.NodeName
			for _, n := range nodes {
				if got == n {
					return ""
				}
			}
			return fmt.Sprintf("on %q, want one of %v", got, nodes)
		})
		return got
	}
	unschedulable := func(pod, message string) {
		t.Helper()
		re := regexp.MustCompile(`^0/\d+ nodes are available: ` + regexp.QuoteMeta(message) + `$`)
		eventually(t, pod+" unschedulable", func() string {
			p, err := pods.Get(ctx, pod)
			if err != nil {
				return err.Error()
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && re.MatchString(cond.Message) {
					return ""
				}
			}
			return fmt.Sprintf("node %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
		})
	}

	// A missing claim keeps the pod Pending until it appears; then the claim is provisioned
	// on the node chosen and the pod follows it there.
	podUsing("late", "late-claim")
	unschedulable("late", `persistentvolumeclaim "late-claim" not found.`)
	claim("late-claim", local)
	node := onNode("late", nodeA, nodeB)
	pvc, err := claims.Get(ctx, "late-claim")
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler binds the pod once the claim names its volume (as Kubernetes' volume
	// binder checks it); the claim's phase is its status, written by the next step of the
	// volume controller, a moment later.
	if pvc.Spec.VolumeName == "" {
		t.Errorf("the pod was bound before its claim: claim %s, no volume", pvc.Status.Phase)
	}
	eventually(t, "late-claim Bound", func() string {
		if pvc, err = claims.Get(ctx, "late-claim"); err != nil {
			return err.Error()
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return "phase " + string(pvc.Status.Phase)
		}
		return ""
	})
	if _, err := os.Stat(filepath.Join(dirs[node], pvc.Spec.VolumeName)); err != nil {
		t.Errorf("the volume is not on the pod's node %s: %v", node, err)
	}

	// A claim of an Immediate class that nothing binds keeps its pod Pending.
	claim("immediate", "")
	podUsing("waits", "immediate")
	unschedulable("waits", "pod has unbound immediate PersistentVolumeClaims.")

	// A WaitForFirstConsumer claim takes the Available volume there is, on node B.
	volumeOn(ns+"-static-b", static, nodeB)
	claim("static", static)
	podUsing("static-user", "static")
	onNode("static-user", nodeB)
	if pvc, err := claims.Get(ctx, "static"); err != nil || pvc.Spec.VolumeName != ns+"-static-b" {
		t.Errorf("static claim bound to %v (%v)", pvc.Spec.VolumeName, err)
	}

	// Without such a volume, and without a provisioner, the pod cannot go anywhere.
	claim("static-2", static)
	podUsing("static-2-user", "static-2")
	unschedulable("static-2-user", "2 node(s) didn't find available persistent volumes to bind.")

	// A second pod of a bound claim goes where its volume is.
	podUsing("second", "static")
	onNode("second", nodeB)
}
