package registry

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func hostPathPV(name, size string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:            modes,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + name}},
		},
	}
}

func claim(name, size string, class *string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: meta(name),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: class,
		},
	}
}

func storageClass(name, provisioner string, isDefault bool, created time.Time) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}, Provisioner: provisioner}
	if isDefault {
		sc.Annotations = map[string]string{pv.AnnDefaultClass: "true"}
	}
	return sc
}

// paths lists the field paths of errs, sorted, for comparing against expectations.
func paths(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field+":"+string(e.Type))
	}
	slices.Sort(out)
	return out
}

func TestPersistentVolumeDefaults(t *testing.T) {
	v := hostPathPV("v", "1Gi", corev1.ReadWriteOnce)
	v.Status.Phase = corev1.VolumeBound // a client may not set the status on create
	persistentVolumes.PrepareCreate(v)
	if v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || *v.Spec.VolumeMode != corev1.PersistentVolumeFilesystem ||
		*v.Spec.HostPath.Type != corev1.HostPathUnset || v.Status.Phase != corev1.VolumePending || v.Status.LastPhaseTransitionTime == nil {
		t.Fatalf("defaults: %+v %+v", v.Spec, v.Status)
	}
	if errs := persistentVolumes.ValidateObject(v, nil); len(errs) > 0 {
		t.Fatalf("valid volume: %v", errs)
	}
	// A phase change moves the transition time; a status write without one keeps it.
	old := v.DeepCopy()
	old.Status.LastPhaseTransitionTime = new(metav1.NewTime(time.Now().Add(-time.Hour)))
	next := old.DeepCopy()
	next.Status.Phase = corev1.VolumeAvailable
	persistentVolumes.PrepareUpdate(next, old, "status")
	if next.Status.LastPhaseTransitionTime.Equal(old.Status.LastPhaseTransitionTime) {
		t.Errorf("phase changed but the transition time did not")
	}
	same := old.DeepCopy()
	same.Status.LastPhaseTransitionTime = nil
	persistentVolumes.PrepareUpdate(same, old, "status")
	if !same.Status.LastPhaseTransitionTime.Equal(old.Status.LastPhaseTransitionTime) {
		t.Errorf("same phase changed the transition time")
	}
}

func TestPersistentVolumeValidation(t *testing.T) {
	affinity := &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}
	for _, tc := range []struct {
		name   string
		change func(*corev1.PersistentVolume)
		want   []string
	}{
		{"valid", func(*corev1.PersistentVolume) {}, nil},
		{"no access modes", func(v *corev1.PersistentVolume) { v.Spec.AccessModes = nil }, []string{"spec.accessModes:FieldValueRequired"}},
		{"unknown access mode", func(v *corev1.PersistentVolume) {
			v.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{"Sometimes"}
		},
			[]string{"spec.accessModes:FieldValueNotSupported"}},
		{"RWOP with others", func(v *corev1.PersistentVolume) {
			v.Spec.AccessModes = append(v.Spec.AccessModes, corev1.ReadWriteOncePod)
		}, []string{"spec.accessModes:FieldValueForbidden"}},
		{"no capacity", func(v *corev1.PersistentVolume) { v.Spec.Capacity = nil },
			[]string{"spec.capacity:FieldValueNotSupported", "spec.capacity:FieldValueRequired"}},
		{"zero capacity", func(v *corev1.PersistentVolume) { v.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("0") },
			[]string{"spec.capacity[storage]:FieldValueInvalid"}},
		{"cpu capacity", func(v *corev1.PersistentVolume) { v.Spec.Capacity[corev1.ResourceCPU] = resource.MustParse("1") },
			[]string{"spec.capacity:FieldValueNotSupported"}},
		{"no source", func(v *corev1.PersistentVolume) { v.Spec.HostPath = nil }, []string{"spec:FieldValueRequired"}},
		{"two sources", func(v *corev1.PersistentVolume) {
			v.Spec.NFS = &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}
		}, []string{"spec.nfs:FieldValueForbidden"}},
		{"hostPath backsteps", func(v *corev1.PersistentVolume) { v.Spec.HostPath.Path = "/data/../etc" },
			[]string{"spec.hostPath.path:FieldValueInvalid"}},
		{"hostPath no path", func(v *corev1.PersistentVolume) { v.Spec.HostPath.Path = "" }, []string{"spec.hostPath.path:FieldValueRequired"}},
		{"hostPath bad type", func(v *corev1.PersistentVolume) { v.Spec.HostPath.Type = new(corev1.HostPathType("Pipe")) },
			[]string{"spec.hostPath.type:FieldValueNotSupported"}},
		{"recycle /", func(v *corev1.PersistentVolume) {
			v.Spec.HostPath.Path, v.Spec.PersistentVolumeReclaimPolicy = "/", corev1.PersistentVolumeReclaimRecycle
		}, []string{"spec.persistentVolumeReclaimPolicy:FieldValueForbidden"}},
		{"bad reclaim policy", func(v *corev1.PersistentVolume) { v.Spec.PersistentVolumeReclaimPolicy = "Shred" },
			[]string{"spec.persistentVolumeReclaimPolicy:FieldValueNotSupported"}},
		{"local without affinity", func(v *corev1.PersistentVolume) {
			v.Spec.HostPath, v.Spec.Local = nil, &corev1.LocalVolumeSource{Path: "/mnt/disk"}
		}, []string{"spec.nodeAffinity:FieldValueRequired"}},
		{"local with affinity", func(v *corev1.PersistentVolume) {
			v.Spec.HostPath, v.Spec.Local, v.Spec.NodeAffinity = nil, &corev1.LocalVolumeSource{Path: "/mnt/disk"}, affinity
		}, nil},
		{"affinity without terms", func(v *corev1.PersistentVolume) {
			v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{}}
		}, []string{"spec.nodeAffinity.required.nodeSelectorTerms:FieldValueRequired"}},
		{"affinity bad operator", func(v *corev1.PersistentVolume) {
			a := affinity.DeepCopy()
			a.Required.NodeSelectorTerms[0].MatchExpressions[0].Operator = "Near"
			v.Spec.NodeAffinity = a
		}, []string{"spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator:FieldValueInvalid"}},
		{"affinity In without values", func(v *corev1.PersistentVolume) {
			a := affinity.DeepCopy()
			a.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = nil
			v.Spec.NodeAffinity = a
		}, []string{"spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values:FieldValueRequired"}},
		{"affinity without required", func(v *corev1.PersistentVolume) { v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{} },
			[]string{"spec.nodeAffinity.required:FieldValueRequired"}},
		{"bad class", func(v *corev1.PersistentVolume) { v.Spec.StorageClassName = "Fast_Disk" },
			[]string{"spec.storageClassName:FieldValueInvalid"}},
		{"bad volume mode", func(v *corev1.PersistentVolume) { v.Spec.VolumeMode = new(corev1.PersistentVolumeMode("Tape")) },
			[]string{"spec.volumeMode:FieldValueNotSupported"}},
		{"mount options on hostPath", func(v *corev1.PersistentVolume) {
			v.Annotations = map[string]string{corev1.MountOptionAnnotation: "ro"}
		}, []string{"metadata.annotations.volume.beta.kubernetes.io/mount-options:FieldValueForbidden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := hostPathPV("v", "1Gi", corev1.ReadWriteOnce)
			tc.change(v)
			persistentVolumes.PrepareCreate(v)
			if got := paths(persistentVolumes.ValidateObject(v, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPersistentVolumeUpdate(t *testing.T) {
	old := hostPathPV("v", "1Gi", corev1.ReadWriteOnce)
	old.ResourceVersion = "1"
	persistentVolumes.PrepareCreate(old)
	for _, tc := range []struct {
		name   string
		change func(*corev1.PersistentVolume)
		want   []string
	}{
		{"claimRef and capacity may change", func(v *corev1.PersistentVolume) {
			v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "c"}
			v.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}, nil},
		{"source is immutable", func(v *corev1.PersistentVolume) { v.Spec.HostPath.Path = "/elsewhere" },
			[]string{"spec.persistentvolumesource:FieldValueForbidden"}},
		{"volume mode is immutable", func(v *corev1.PersistentVolume) { v.Spec.VolumeMode = new(corev1.PersistentVolumeBlock) },
			[]string{"volumeMode:FieldValueInvalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := old.DeepCopy()
			tc.change(v)
			persistentVolumes.PrepareUpdate(v, old, "")
			if got := paths(persistentVolumes.ValidateObject(v, old)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPersistentVolumeClaimValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*corev1.PersistentVolumeClaim)
		want   []string
	}{
		{"valid", func(*corev1.PersistentVolumeClaim) {}, nil},
		{"no access modes", func(c *corev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }, []string{"spec.accessModes:FieldValueRequired"}},
		{"no storage request", func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil },
			[]string{"spec.resources[storage]:FieldValueRequired"}},
		{"negative request", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("-1Gi")
		}, []string{"spec.resources[storage]:FieldValueInvalid"}},
		{"bad selector", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}
		}, []string{"spec.selector.matchExpressions[0].operator:FieldValueInvalid"}},
		{"bad class", func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = new("No Spaces") },
			[]string{"spec.storageClassName:FieldValueInvalid"}},
		{"data source of the core group must be a claim", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "Pod", Name: "p"}
		}, []string{"spec.dataSource:FieldValueInvalid", "spec.dataSourceRef:FieldValueInvalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claim("c", "1Gi", nil)
			tc.change(c)
			persistentVolumeClaims.PrepareCreate(c)
			if got := paths(persistentVolumeClaims.ValidateObject(c, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPersistentVolumeClaimUpdate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		old    func(*corev1.PersistentVolumeClaim)
		change func(*corev1.PersistentVolumeClaim)
		want   []string
	}{
		{"binder sets volumeName", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-1" }, nil},
		{"volumeName changes once only", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-1" },
			func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-2" }, []string{"spec:FieldValueForbidden"}},
		{"class given later", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = new("fast") }, nil},
		{"class changed", func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = new("slow") },
			func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = new("fast") }, []string{"spec:FieldValueForbidden"}},
		{"access modes are immutable", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}, []string{"spec:FieldValueForbidden"}},
		{"unbound claim may not grow", nil, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}, []string{"spec:FieldValueForbidden"}},
		{"bound claim may grow", func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimBound },
			func(c *corev1.PersistentVolumeClaim) {
				c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
			}, nil},
		{"bound claim may not shrink below its capacity", func(c *corev1.PersistentVolumeClaim) {
			c.Status.Phase, c.Status.Capacity = corev1.ClaimBound, corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		}, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("512Mi")
		},
			[]string{"spec.resources.requests.storage:FieldValueForbidden"}},
		{"volume mode is immutable", nil, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = new(corev1.PersistentVolumeBlock) },
			[]string{"spec:FieldValueForbidden", "volumeMode:FieldValueInvalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := claim("c", "1Gi", nil)
			old.ResourceVersion = "1"
			persistentVolumeClaims.PrepareCreate(old)
			if tc.old != nil {
				tc.old(old)
			}
			c := old.DeepCopy()
			tc.change(c)
			persistentVolumeClaims.PrepareUpdate(c, old, "")
			if got := paths(persistentVolumeClaims.ValidateObject(c, old)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStorageClassValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*storagev1.StorageClass)
		want   []string
	}{
		{"valid", func(*storagev1.StorageClass) {}, nil},
		{"no provisioner", func(sc *storagev1.StorageClass) { sc.Provisioner = "" }, []string{"provisioner:FieldValueRequired"}},
		{"bad provisioner", func(sc *storagev1.StorageClass) { sc.Provisioner = "a/b/c" }, []string{"provisioner:FieldValueInvalid"}},
		{"recycle is not a class policy", func(sc *storagev1.StorageClass) { sc.ReclaimPolicy = new(corev1.PersistentVolumeReclaimRecycle) },
			[]string{"reclaimPolicy:FieldValueNotSupported"}},
		{"bad binding mode", func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = new(storagev1.VolumeBindingMode("Later")) },
			[]string{"volumeBindingMode:FieldValueNotSupported"}},
		{"empty parameter key", func(sc *storagev1.StorageClass) { sc.Parameters = map[string]string{"": "x"} },
			[]string{"parameters:FieldValueInvalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := storageClass("fast", "example.com/disk", false, time.Now())
			tc.change(sc)
			storageClasses.PrepareCreate(sc)
			if got := paths(storageClasses.ValidateObject(sc, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
	old := storageClass("fast", "example.com/disk", false, time.Now())
	old.ResourceVersion = "1"
	storageClasses.PrepareCreate(old)
	if *old.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *old.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Fatalf("defaults: %v %v", *old.ReclaimPolicy, *old.VolumeBindingMode)
	}
	sc := old.DeepCopy()
	sc.Provisioner, sc.Parameters, sc.ReclaimPolicy = "example.com/other", map[string]string{"a": "b"}, new(corev1.PersistentVolumeReclaimRetain)
	sc.VolumeBindingMode, sc.AllowVolumeExpansion = new(storagev1.VolumeBindingWaitForFirstConsumer), new(true)
	storageClasses.PrepareUpdate(sc, old, "")
	want := []string{"parameters:FieldValueInvalid", "provisioner:FieldValueInvalid", "reclaimPolicy:FieldValueInvalid", "volumeBindingMode:FieldValueInvalid"}
	if got := paths(storageClasses.ValidateObject(sc, old)); !slices.Equal(got, want) {
		t.Errorf("update errors %v, want %v", got, want)
	}
}

// fakeObjects serves admission from a fixed list of StorageClasses.
type fakeObjects []*storagev1.StorageClass

func (f fakeObjects) List(context.Context, schema.GroupResource) ([]Object, error) {
	var out []Object
	for _, sc := range f {
		out = append(out, sc)
	}
	return out, nil
}

func (f fakeObjects) Get(_ context.Context, gr schema.GroupResource, _, name string) (Object, error) {
	for _, sc := range f {
		if sc.Name == name {
			return sc, nil
		}
	}
	return nil, apierrors.NewNotFound(gr, name)
}

func TestClaimAdmission(t *testing.T) {
	now := time.Now()
	old, newer := storageClass("old-default", "p", true, now.Add(-time.Hour)), storageClass("new-default", "p", true, now)
	plain := storageClass("plain", "p", false, now.Add(time.Hour))
	for _, tc := range []struct {
		name    string
		classes fakeObjects
		class   *string
		want    *string
	}{
		{"no default", fakeObjects{plain}, nil, nil},
		{"one default", fakeObjects{old, plain}, nil, new("old-default")},
		{"newest default wins", fakeObjects{old, newer, plain}, nil, new("new-default")},
		{"explicit class kept", fakeObjects{old}, new("plain"), new("plain")},
		{"explicit empty class kept", fakeObjects{old}, new(""), new("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claim("c", "1Gi", tc.class)
			persistentVolumeClaims.PrepareCreate(c)
			if err := persistentVolumeClaims.AdmitFor(context.Background(), tc.classes, c, nil, ""); err != nil {
				t.Fatal(err)
			}
			if deref(c.Spec.StorageClassName) != deref(tc.want) || (c.Spec.StorageClassName == nil) != (tc.want == nil) {
				t.Errorf("class %v, want %v", c.Spec.StorageClassName, tc.want)
			}
			if !slices.Equal(c.Finalizers, []string{pv.PVCProtectionFinalizer}) {
				t.Errorf("finalizers %v", c.Finalizers)
			}
		})
	}

	expandable := storageClass("grow", "p", false, now)
	expandable.AllowVolumeExpansion = new(true)
	for _, tc := range []struct {
		name, class string
		phase       corev1.PersistentVolumeClaimPhase
		wantErr     string
	}{
		{"expandable class", "grow", corev1.ClaimBound, ""},
		{"class without expansion", "plain", corev1.ClaimBound, "only dynamically provisioned pvc can be resized"},
		{"unbound", "grow", corev1.ClaimPending, "Only bound persistent volume claims can be expanded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := claim("c", "1Gi", new(tc.class))
			before.Status.Phase = tc.phase
			after := before.DeepCopy()
			after.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
			err := persistentVolumeClaims.ValidateAdmissionFor(context.Background(), fakeObjects{plain, expandable}, after, before, "")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want 403 with %q", err, tc.wantErr)
			}
		})
	}

	v := hostPathPV("v", "1Gi", corev1.ReadWriteOnce)
	if err := persistentVolumes.AdmitFor(context.Background(), nil, v, nil, ""); err != nil || !slices.Equal(v.Finalizers, []string{pv.PVProtectionFinalizer}) {
		t.Errorf("volume finalizers %v (%v)", v.Finalizers, err)
	}
}

func TestStorageRows(t *testing.T) {
	v := hostPathPV("v", "5Gi", corev1.ReadWriteMany, corev1.ReadWriteOnce)
	persistentVolumes.PrepareCreate(v)
	v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "data"}
	v.Spec.StorageClassName = "fast"
	v.Status.Phase = corev1.VolumeBound
	got := persistentVolumes.TableRow(v)
	want := []any{"v", "5Gi", "RWO,RWX", "Retain", "Bound", "ns/data", "fast", "<unset>", "", got[9], "Filesystem"}
	if !slices.Equal(got, want) {
		t.Errorf("pv row %q, want %q", got, want)
	}

	c := claim("data", "1Gi", new("fast"))
	persistentVolumeClaims.PrepareCreate(c)
	got = persistentVolumeClaims.TableRow(c)
	if want := []any{"data", "Pending", "", "", "", "fast", "<unset>", got[7], "Filesystem"}; !slices.Equal(got, want) {
		t.Errorf("pending pvc row %q, want %q", got, want)
	}
	c.Spec.VolumeName, c.Status.Phase = "v", corev1.ClaimBound
	c.Status.Capacity, c.Status.AccessModes = v.Spec.Capacity, v.Spec.AccessModes
	got = persistentVolumeClaims.TableRow(c)
	if want := []any{"data", "Bound", "v", "5Gi", "RWO,RWX", "fast", "<unset>", got[7], "Filesystem"}; !slices.Equal(got, want) {
		t.Errorf("bound pvc row %q, want %q", got, want)
	}

	sc := storageClass("local-path", "kplane.io/local-path", true, time.Now())
	storageClasses.PrepareCreate(sc)
	got = storageClasses.TableRow(sc)
	if want := []any{"local-path (default)", "kplane.io/local-path", "Delete", "Immediate", false, got[5]}; !slices.Equal(got, want) {
		t.Errorf("sc row %v, want %v", got, want)
	}
}
