//go:build linux

package reference

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStatefulSetsMatchReference runs the reference kube-controller-manager's statefulset
// controller and then kplane's on the same StatefulSets (OrderedReady and Parallel with
// volumeClaimTemplates and claim retention policies both ways, a RollingUpdate with a partition, OnDelete),
// the test playing the node (a pod runs, ready at once; a pod being deleted is gone). After the
// sets are created, after scaling three of them down 3→1 and changing the others' templates,
// after deleting an OnDelete pod and after pods fail, each StatefulSet's status (revisions shown by number), its
// ControllerRevisions' numbers, its pods (names, ordinal labels, revision) and its claims
// (names, owners by kind and name) must be the same.
//
//	KPLANE_REFERENCE_KCM=/path/to/kube-controller-manager go test -count=1 -v -run TestStatefulSetsMatchReference ./test/reference/
func TestStatefulSetsMatchReference(t *testing.T) {
	runDifferential(t, scenario{
		prefix:      "sts",
		controllers: "statefulset",
		node:        playNode(false),
		steps: []step{
			{name: "creating the StatefulSets", act: createStatefulSets, atRest: statefulSetsAtRest},
			{name: "scaling down and changing templates", act: scaleAndChangeStatefulSets, atRest: statefulSetsAtRest},
			{name: "deleting an OnDelete pod", act: deleteOnDeleteStatefulPod, atRest: statefulSetsAtRest},
			{name: "pods failing", act: failStatefulPods, atRest: statefulSetsAtRest},
		},
		outcomes: statefulSetOutcomes,
		retire:   deleteAll[*appsv1.StatefulSet]("statefulsets"),
	})
}

func statefulSetFixture() []*appsv1.StatefulSet {
	sts := func(name string, change func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
		labels := map[string]string{"app": name}
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.StatefulSetSpec{
			Replicas:    new(int32(3)),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}},
		}}
		change(s)
		return s
	}
	claims := func(s *appsv1.StatefulSet) {
		s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType}
		s.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	}
	return []*appsv1.StatefulSet{
		sts("ordered", claims),
		sts("parallel", func(s *appsv1.StatefulSet) {
			claims(s)
			s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		}),
		sts("partition", func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(2))}}
		}),
		// The other way round: claims owned by the set, kept on scale-down.
		sts("owned", func(s *appsv1.StatefulSet) {
			claims(s)
			s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenScaled: appsv1.RetainPersistentVolumeClaimRetentionPolicyType, WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
		}),
		sts("ondelete", func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		}),
	}
}

func createStatefulSets(ctx context.Context, c *client.Client, ns string) error {
	for _, s := range statefulSetFixture() {
		if _, err := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ns).Create(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func scaleAndChangeStatefulSets(ctx context.Context, c *client.Client, ns string) error {
	api := client.Resource[*appsv1.StatefulSet](c, "statefulsets").Namespace(ns)
	for _, name := range []string{"ordered", "parallel", "owned"} {
		if err := modify(ctx, api, name, func(s *appsv1.StatefulSet) { s.Spec.Replicas = new(int32(1)) }); err != nil {
			return err
		}
	}
	for _, name := range []string{"partition", "ondelete"} {
		if err := modify(ctx, api, name, func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "VERSION", Value: "2"}}
		}); err != nil {
			return err
		}
	}
	return nil
}

func deleteOnDeleteStatefulPod(ctx context.Context, c *client.Client, ns string) error {
	return client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Delete(ctx, "ondelete-0", metav1.DeleteOptions{})
}

// failStatefulPods fails a pod of the OrderedReady set and one the partition keeps at the old
// revision: both are replaced, the latter still at its old revision.
func failStatefulPods(ctx context.Context, c *client.Client, ns string) error {
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for _, name := range []string{"ordered-0", "partition-1"} {
		p, err := pods.Get(ctx, name)
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodFailed
		if _, err := pods.UpdateStatus(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// statefulSetsAtRest: each StatefulSet's status is of its generation, all its replicas are
// ready and, for a RollingUpdate, as many are updated as its partition allows (all, when there
// is one revision); no pod is being deleted.
func statefulSetsAtRest(ctx context.Context, c *client.Client, ns string) ([]string, error) {
	l, pl, err := listWithPods[*appsv1.StatefulSet](ctx, c, "statefulsets", ns)
	if err != nil {
		return nil, err
	}
	var moving []string
	for _, s := range l {
		st, want := s.Status, *s.Spec.Replicas
		done := st.ObservedGeneration == s.Generation && st.Replicas == want && st.ReadyReplicas == want && st.AvailableReplicas == want
		if ru := s.Spec.UpdateStrategy; ru.Type == appsv1.RollingUpdateStatefulSetStrategyType {
			updated := want
			if ru.RollingUpdate != nil && ru.RollingUpdate.Partition != nil && st.CurrentRevision != st.UpdateRevision {
				updated -= *ru.RollingUpdate.Partition
			}
			done = done && st.UpdatedReplicas == updated
		}
		if !done {
			moving = append(moving, s.Name)
		}
	}
	return append(moving, unsettledPods(pl, nil)...), nil
}

// statefulSetOutcomes renders each StatefulSet's status, revisions, pods and claims.
func statefulSetOutcomes(ctx context.Context, c *client.Client, ns string) (map[string]string, error) {
	l, pl, err := listWithPods[*appsv1.StatefulSet](ctx, c, "statefulsets", ns)
	if err != nil {
		return nil, err
	}
	cl, err := list[*corev1.PersistentVolumeClaim](ctx, c, "persistentvolumeclaims", ns)
	if err != nil {
		return nil, err
	}
	revs, err := revisionsByOwner(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range l {
		st := s.Status
		h := revs[s.Name]
		var conds []string
		for _, cond := range st.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s(%s)", cond.Type, cond.Status, cond.Reason))
		}
		out["statefulset "+s.Name] = fmt.Sprintf("replicas=%d ready=%d current=%d updated=%d available=%d currentRevision=%s updateRevision=%s observedGeneration=%d/%d collisionCount=%d conditions=%v revisions=%s",
			st.Replicas, st.ReadyReplicas, st.CurrentReplicas, st.UpdatedReplicas, st.AvailableReplicas,
			h.number(st.CurrentRevision), h.number(st.UpdateRevision),
			st.ObservedGeneration, s.Generation, deref(st.CollisionCount), conds, h)
		for _, p := range pl {
			if !ownedBy(p.OwnerReferences, "StatefulSet", s.Name) {
				continue
			}
			out["pod "+p.Name] = fmt.Sprintf("revision=%s deleting=%v labels=%s hostname=%s subdomain=%s",
				h.number(p.Labels[appsv1.ControllerRevisionHashLabelKey]), p.DeletionTimestamp != nil,
				mustJSON(withoutKey(p.Labels, appsv1.ControllerRevisionHashLabelKey)), p.Spec.Hostname, p.Spec.Subdomain)
		}
	}
	for _, pvc := range cl {
		var owners []string
		for _, o := range pvc.OwnerReferences {
			owners = append(owners, fmt.Sprintf("%s/%s(controller=%v,blockOwnerDeletion=%v)", o.Kind, o.Name, deref(o.Controller), deref(o.BlockOwnerDeletion)))
		}
		slices.Sort(owners)
		out["claim "+pvc.Name] = fmt.Sprintf("owners=[%s] labels=%s deleting=%v", strings.Join(owners, " "), mustJSON(pvc.Labels), pvc.DeletionTimestamp != nil)
	}
	return out, nil
}
