package registry

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func newStatefulSet(change func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	l := map[string]string{"app": "db"}
	ss := &appsv1.StatefulSet{ObjectMeta: meta("db"), Spec: appsv1.StatefulSetSpec{
		ServiceName: "db",
		Selector:    &metav1.LabelSelector{MatchLabels: l},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "postgres:17",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
		VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claimTemplate("data")},
	}}
	if change != nil {
		change(ss)
	}
	return ss
}

func claimTemplate(name string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
}

func TestStatefulSetDefaults(t *testing.T) {
	ss := newStatefulSet(nil)
	statefulSets.PrepareCreate(ss)
	s := ss.Spec
	ru := s.UpdateStrategy.RollingUpdate
	rp := s.PersistentVolumeClaimRetentionPolicy
	if deref(s.Replicas) != 1 || s.PodManagementPolicy != appsv1.OrderedReadyPodManagement ||
		s.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || ru == nil || deref(ru.Partition) != 0 ||
		ru.MaxUnavailable != nil || deref(s.RevisionHistoryLimit) != 10 || rp == nil ||
		rp.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || rp.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("defaults: %+v", s)
	}
	if s.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || s.Template.Spec.DNSPolicy != corev1.DNSClusterFirst {
		t.Errorf("template not defaulted: %+v", s.Template.Spec)
	}
	if c := s.VolumeClaimTemplates[0]; c.Status.Phase != corev1.ClaimPending || deref(c.Spec.VolumeMode) != corev1.PersistentVolumeFilesystem {
		t.Errorf("claim template not defaulted: %+v", c)
	}
	if errs := statefulSets.ValidateObject(ss, nil); len(errs) > 0 {
		t.Errorf("defaulted statefulset invalid: %v", errs)
	}
	// An explicit RollingUpdate type without its struct stays so; OnDelete gets no partition.
	explicit := newStatefulSet(func(ss *appsv1.StatefulSet) {
		ss.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	})
	statefulSets.PrepareCreate(explicit)
	if explicit.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("explicit RollingUpdate got %+v", explicit.Spec.UpdateStrategy.RollingUpdate)
	}
	onDelete := newStatefulSet(func(ss *appsv1.StatefulSet) { ss.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType })
	statefulSets.PrepareCreate(onDelete)
	if onDelete.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("OnDelete got %+v", onDelete.Spec.UpdateStrategy.RollingUpdate)
	}
}

func TestValidateStatefulSet(t *testing.T) {
	maxUnavailable := func(v intstr.IntOrString) func(*appsv1.StatefulSet) {
		return func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: &v}
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*appsv1.StatefulSet)
		want   []string
	}{
		{"ok", nil, nil},
		{"no service name", func(ss *appsv1.StatefulSet) { ss.Spec.ServiceName = "" }, nil},
		{"bad service name", func(ss *appsv1.StatefulSet) { ss.Spec.ServiceName = "DB.svc" }, []string{"FieldValueInvalid spec.serviceName"}},
		{"name not a DNS label", func(ss *appsv1.StatefulSet) { ss.Name = "db.main" }, []string{"FieldValueInvalid metadata.name"}},
		{"no selector", func(ss *appsv1.StatefulSet) { ss.Spec.Selector = nil }, []string{"FieldValueRequired spec.selector"}},
		{"empty selector", func(ss *appsv1.StatefulSet) { ss.Spec.Selector = &metav1.LabelSelector{} }, []string{"FieldValueInvalid spec.selector"}},
		{"selector not matching", func(ss *appsv1.StatefulSet) { ss.Spec.Selector.MatchLabels = map[string]string{"app": "web"} },
			[]string{"FieldValueInvalid spec.template.metadata.labels"}},
		{"negative counts", func(ss *appsv1.StatefulSet) {
			ss.Spec.Replicas, ss.Spec.MinReadySeconds = new(int32(-1)), -2
			ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: -3}
			ss.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(-4))}
		}, []string{"FieldValueInvalid spec.minReadySeconds", "FieldValueInvalid spec.ordinals.start", "FieldValueInvalid spec.replicas",
			"FieldValueInvalid spec.updateStrategy.rollingUpdate.partition"}},
		{"pod management policy", func(ss *appsv1.StatefulSet) { ss.Spec.PodManagementPolicy = "Burst" }, []string{"FieldValueInvalid spec.podManagementPolicy"}},
		{"strategy type", func(ss *appsv1.StatefulSet) { ss.Spec.UpdateStrategy.Type = "Recreate" }, []string{"FieldValueInvalid spec.updateStrategy"}},
		{"rollingUpdate with OnDelete", func(ss *appsv1.StatefulSet) {
			ss.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{}}
		}, []string{"FieldValueInvalid spec.updateStrategy.rollingUpdate"}},
		{"maxUnavailable 2", maxUnavailable(intstr.FromInt32(2)), nil},
		{"maxUnavailable 50%", maxUnavailable(intstr.FromString("50%")), nil},
		{"maxUnavailable 0", maxUnavailable(intstr.FromInt32(0)), []string{"FieldValueInvalid spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"maxUnavailable 0%", maxUnavailable(intstr.FromString("0%")), []string{"FieldValueInvalid spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"maxUnavailable -1", maxUnavailable(intstr.FromInt32(-1)), []string{"FieldValueInvalid spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"maxUnavailable 101%", maxUnavailable(intstr.FromString("101%")), []string{"FieldValueInvalid spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"maxUnavailable not a percent", maxUnavailable(intstr.FromString("half")), []string{
			"FieldValueInvalid spec.updateStrategy.rollingUpdate.maxUnavailable", "FieldValueInvalid spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{"retention policy", func(ss *appsv1.StatefulSet) {
			ss.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Keep", WhenScaled: "Delete"}
		}, []string{"FieldValueNotSupported spec.persistentVolumeClaimRetentionPolicy.whenDeleted"}},
		{"restartPolicy", func(ss *appsv1.StatefulSet) { ss.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			[]string{"FieldValueNotSupported spec.template.spec.restartPolicy"}},
		{"activeDeadlineSeconds", func(ss *appsv1.StatefulSet) { ss.Spec.Template.Spec.ActiveDeadlineSeconds = new(int64(5)) },
			[]string{"FieldValueForbidden spec.template.spec.activeDeadlineSeconds"}},
		{"hostname and subdomain are the controller's", func(ss *appsv1.StatefulSet) {
			ss.Spec.Template.Spec.Hostname, ss.Spec.Template.Spec.Subdomain = "Not_A_Label", "Nor_This"
		}, nil},
		{"mount of no volume", func(ss *appsv1.StatefulSet) { ss.Spec.VolumeClaimTemplates = nil },
			[]string{"FieldValueNotFound spec.template.spec.containers[0].volumeMounts[0].name"}},
		{"claim template replaces a volume of its name", func(ss *appsv1.StatefulSet) {
			ss.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, nil},
		{"duplicate claim templates", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates = append(ss.Spec.VolumeClaimTemplates, claimTemplate("data"))
		}, []string{"FieldValueDuplicate spec.volumeClaimTemplates[1].metadata.name"}},
		{"claim template name not a label", func(ss *appsv1.StatefulSet) { ss.Spec.VolumeClaimTemplates[0].Name = "Data" },
			[]string{"FieldValueInvalid spec.template.spec.volumes[0].name", "FieldValueNotFound spec.template.spec.containers[0].volumeMounts[0].name"}},
		{"claim template without size or modes", func(ss *appsv1.StatefulSet) {
			ss.Spec.VolumeClaimTemplates[0].Spec = corev1.PersistentVolumeClaimSpec{}
		}, []string{"FieldValueRequired spec.volumeClaimTemplates[0].spec.accessModes",
			"FieldValueRequired spec.volumeClaimTemplates[0].spec.resources[storage]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := newStatefulSet(tc.change)
			statefulSets.PrepareCreate(ss)
			if got := errs(statefulSets.ValidateObject(ss, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateStatefulSetUpdate(t *testing.T) {
	ss := func(o Object) *appsv1.StatefulSet { return o.(*appsv1.StatefulSet) }
	forbidden := []string{"FieldValueForbidden spec"}
	checkUpdates(t, []updateCase{
		{"replicas", statefulSets, newStatefulSet(nil), func(o Object) { ss(o).Spec.Replicas = new(int32(5)) }, nil},
		{"template", statefulSets, newStatefulSet(nil), func(o Object) { ss(o).Spec.Template.Spec.Containers[0].Image = "postgres:18" }, nil},
		{"strategy, partition, history, retention, minReadySeconds, ordinals", statefulSets, newStatefulSet(nil), func(o Object) {
			s := &ss(o).Spec
			s.UpdateStrategy.RollingUpdate.Partition = new(int32(2))
			s.RevisionHistoryLimit, s.MinReadySeconds = new(int32(3)), 10
			s.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
			s.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
		}, nil},
		{"service name", statefulSets, newStatefulSet(nil), func(o Object) { ss(o).Spec.ServiceName = "other" }, forbidden},
		{"pod management policy", statefulSets, newStatefulSet(nil), func(o Object) { ss(o).Spec.PodManagementPolicy = appsv1.ParallelPodManagement }, forbidden},
		{"claim templates", statefulSets, newStatefulSet(nil), func(o Object) {
			ss(o).Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}, forbidden},
		{"selector", statefulSets, newStatefulSet(nil), func(o Object) {
			s := &ss(o).Spec
			s.Selector.MatchLabels = map[string]string{"app": "db", "tier": "x"}
			s.Template.Labels = map[string]string{"app": "db", "tier": "x"}
		}, forbidden},
		{"bad template", statefulSets, newStatefulSet(nil), func(o Object) { ss(o).Spec.Template.Spec.Containers[0].Image = "" },
			[]string{"FieldValueRequired spec.template.spec.containers[0].image"}},
		{"collision count decremented", statefulSets, newStatefulSet(func(s *appsv1.StatefulSet) { s.Status.CollisionCount = new(int32(2)) }),
			func(o Object) { ss(o).Status.CollisionCount = new(int32(1)) }, nil}, // a spec write keeps the stored status
	})
	// Status writes: counts consistent, the collision count never going back.
	old := newStatefulSet(nil)
	statefulSets.PrepareCreate(old)
	old.ResourceVersion = "1"
	old.Status = appsv1.StatefulSetStatus{Replicas: 3, CollisionCount: new(int32(2))}
	for _, tc := range []struct {
		name string
		st   appsv1.StatefulSetStatus
		want []string
	}{
		{"ok", appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 2, CurrentReplicas: 3, CollisionCount: new(int32(2))}, nil},
		{"more ready than replicas", appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 2, CollisionCount: new(int32(2))},
			[]string{"FieldValueInvalid status.readyReplicas"}},
		{"more available than ready", appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 1, AvailableReplicas: 2, CollisionCount: new(int32(2))},
			[]string{"FieldValueInvalid status.availableReplicas"}},
		{"negative", appsv1.StatefulSetStatus{Replicas: 3, ObservedGeneration: -1, CollisionCount: new(int32(2))}, []string{"FieldValueInvalid status.observedGeneration"}},
		{"collisions decremented", appsv1.StatefulSetStatus{Replicas: 3, CollisionCount: new(int32(1))}, []string{"FieldValueInvalid status.collisionCount"}},
	} {
		next := old.DeepCopy()
		next.Status = tc.st
		statefulSets.PrepareUpdate(next, old, "status")
		if got := errs(statefulSets.ValidateObject(next, old)); !slices.Equal(got, tc.want) {
			t.Errorf("status %s: errors %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStatefulSetTable(t *testing.T) {
	ss := newStatefulSet(nil)
	statefulSets.PrepareCreate(ss)
	ss.Spec.Replicas = new(int32(3))
	ss.Status.ReadyReplicas = 2
	var names []string
	for _, c := range statefulSets.TableColumns() {
		if c.Priority == 0 {
			names = append(names, c.Name)
		}
	}
	if !slices.Equal(names, []string{"Name", "Ready", "Age"}) {
		t.Errorf("columns %v", names)
	}
	row := statefulSets.TableRow(ss)
	if row[0] != "db" || row[1] != "2/3" || row[3] != "c" || row[4] != "postgres:17" {
		t.Errorf("row %v", row)
	}
}
