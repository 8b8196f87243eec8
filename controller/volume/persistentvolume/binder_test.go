package persistentvolume

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeWorld is a world of plain slices.
type fakeWorld struct {
	volumes []*corev1.PersistentVolume
	classes []*storagev1.StorageClass
	pods    []*corev1.Pod
	waiting bool // RecycleWaiting
}

func (w fakeWorld) Volume(name string) *corev1.PersistentVolume {
	for _, v := range w.volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}
func (w fakeWorld) Volumes() []*corev1.PersistentVolume { return w.volumes }
func (w fakeWorld) Class(name string) *storagev1.StorageClass {
	for _, c := range w.classes {
		if c.Name == name {
			return c
		}
	}
	return nil
}
func (w fakeWorld) Classes() []*storagev1.StorageClass { return w.classes }
func (w fakeWorld) PodsUsing(ns, claim string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range w.pods {
		if p.Namespace == ns && pv.PodUsesClaim(p, claim) {
			out = append(out, p)
		}
	}
	return out
}
func (w fakeWorld) Pod(ns, name string) *corev1.Pod {
	for _, p := range w.pods {
		if p.Namespace == ns && p.Name == name {
			return p
		}
	}
	return nil
}
func (w fakeWorld) RecycleWaiting(string) bool { return w.waiting }

// Builders: a volume, a claim and a class, changed by options.

func volume(name, size string, opts ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	v := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data/" + name}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	for _, o := range opts {
		o(v)
	}
	return v
}

func claimRef(c *corev1.PersistentVolumeClaim) func(*corev1.PersistentVolume) {
	return func(v *corev1.PersistentVolume) {
		v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
	}
}

func phase(p corev1.PersistentVolumePhase) func(*corev1.PersistentVolume) {
	return func(v *corev1.PersistentVolume) { v.Status.Phase = p }
}

func policy(p corev1.PersistentVolumeReclaimPolicy) func(*corev1.PersistentVolume) {
	return func(v *corev1.PersistentVolume) { v.Spec.PersistentVolumeReclaimPolicy = p }
}

func volumeClass(name string) func(*corev1.PersistentVolume) {
	return func(v *corev1.PersistentVolume) { v.Spec.StorageClassName = name }
}

func volumeAnnotation(k, val string) func(*corev1.PersistentVolume) {
	return func(v *corev1.PersistentVolume) { metav1.SetMetaDataAnnotation(&v.ObjectMeta, k, val) }
}

func newClaim(name, size string, opts ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: new(""),
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func class(name string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = new(name) }
}

func noClass(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = nil }

func wants(name string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = name }
}

func annotated(k, v string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) { metav1.SetMetaDataAnnotation(&c.ObjectMeta, k, v) }
}

func boundTo(v string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Spec.VolumeName = v
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, pv.AnnBindCompleted, "yes")
		c.Status.Phase = corev1.ClaimBound
	}
}

func selector(k, v string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
}

func storageClass(name, provisioner string, mode storagev1.VolumeBindingMode, isDefault bool) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if isDefault {
		sc.Annotations = map[string]string{pv.AnnDefaultClass: "true"}
	}
	return sc
}

func podUsing(name, claim, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
		Status: corev1.PodStatus{Phase: phase}}
}

// summary renders a plan as lines that a test can compare.
func summary(p plan) []string {
	var out []string
	if v := p.volume; v != nil {
		ref := "nil"
		if r := v.Spec.ClaimRef; r != nil {
			ref = fmt.Sprintf("%s/%s(%s)", r.Namespace, r.Name, r.UID)
		}
		out = append(out, fmt.Sprintf("volume %s: claimRef=%s boundByController=%v", v.Name, ref, metav1.HasAnnotation(v.ObjectMeta, pv.AnnBoundByController)))
	}
	if s := p.volumeStatus; s != nil {
		out = append(out, strings.TrimSpace(fmt.Sprintf("volume phase %s %s", s.Phase, s.Message)))
	}
	if c := p.claim; c != nil {
		var anns []string
		for _, k := range []string{pv.AnnBindCompleted, pv.AnnBoundByController, pv.AnnStorageProvisioner} {
			if v, ok := c.Annotations[k]; ok {
				anns = append(anns, k+"="+v)
			}
		}
		out = append(out, fmt.Sprintf("claim %s: volumeName=%q class=%s %s", c.Name, c.Spec.VolumeName, pv.ClaimClass(c), strings.Join(anns, " ")))
	}
	if s := p.claimStatus; s != nil {
		q := s.Capacity[corev1.ResourceStorage]
		out = append(out, fmt.Sprintf("claim phase %s capacity=%s modes=%s", s.Phase, q.String(), pv.AccessModesString(s.AccessModes)))
	}
	for _, e := range p.events {
		on := "volume"
		if e.onClaim {
			on = "claim"
		}
		out = append(out, fmt.Sprintf("event %s %s %s: %s", on, e.eventType, e.reason, e.message))
	}
	if p.recycler != nil {
		out = append(out, "create recycler "+p.recycler.Name)
	}
	if p.deleteRecycler != nil {
		out = append(out, "delete recycler "+p.deleteRecycler.Name)
	}
	if p.recycleFailed {
		out = append(out, "recycle failed")
	}
	if p.syncClaim != "" {
		out = append(out, "sync claim "+p.syncClaim)
	}
	if p.err != nil {
		out = append(out, "error: "+p.err.Error())
	}
	return out
}

func check(t *testing.T, got plan, want []string) {
	t.Helper()
	if g := summary(got); !slices.Equal(g, want) {
		t.Errorf("plan:\n  %s\nwant:\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestSyncClaim(t *testing.T) {
	data := newClaim("data", "1Gi")
	wffc := storageClass("local", "kplane.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer, false)
	immediate := storageClass("fast", "example.com/disk", storagev1.VolumeBindingImmediate, false)
	intree := storageClass("static", pv.NoProvisioner, storagev1.VolumeBindingImmediate, false)
	const provisioningMsg = "Waiting for a volume to be created either by the external provisioner '%s' or manually by the system " +
		"administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		world fakeWorld
		want  []string
	}{
		{
			name:  "binds the smallest volume that fits",
			claim: data,
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("big", "10Gi"), volume("small", "500Mi"), volume("right", "2Gi")}},
			want: []string{
				"volume right: claimRef=ns/data(uid-data) boundByController=true",
				"volume phase Bound",
				`claim data: volumeName="right" class= pv.kubernetes.io/bind-completed=yes pv.kubernetes.io/bound-by-controller=yes`,
				"claim phase Bound capacity=2Gi modes=RWO",
			},
		},
		{
			name:  "prefers volumes with fewer access modes",
			claim: data,
			world: fakeWorld{volumes: []*corev1.PersistentVolume{
				volume("rwx", "1Gi", func(v *corev1.PersistentVolume) {
					v.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}
				}),
				volume("rwo", "5Gi")}},
			want: []string{
				"volume rwo: claimRef=ns/data(uid-data) boundByController=true",
				"volume phase Bound",
				`claim data: volumeName="rwo" class= pv.kubernetes.io/bind-completed=yes pv.kubernetes.io/bound-by-controller=yes`,
				"claim phase Bound capacity=5Gi modes=RWO",
			},
		},
		{
			name:  "no volume and no class",
			claim: data,
			world: fakeWorld{volumes: []*corev1.PersistentVolume{
				volume("bound", "5Gi", claimRef(newClaim("other", "1Gi"))),
				volume("released", "5Gi", phase(corev1.VolumeReleased)),
				volume("classy", "5Gi", volumeClass("fast")),
				volume("tiny", "1Mi")}},
			want: []string{
				"event claim Normal FailedBinding: no persistent volumes available for this claim and no storage class is set",
			},
		},
		{
			name:  "selector filters volumes",
			claim: newClaim("data", "1Gi", selector("tier", "gold")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{
				volume("plain", "1Gi"),
				volume("gold", "3Gi", func(v *corev1.PersistentVolume) { v.Labels = map[string]string{"tier": "gold"} })}},
			want: []string{
				"volume gold: claimRef=ns/data(uid-data) boundByController=true",
				"volume phase Bound",
				`claim data: volumeName="gold" class= pv.kubernetes.io/bind-completed=yes pv.kubernetes.io/bound-by-controller=yes`,
				"claim phase Bound capacity=3Gi modes=RWO",
			},
		},
		{
			name:  "a volume pre-bound to the claim wins, even if larger",
			claim: data,
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("other", "1Gi"),
				volume("reserved", "8Gi", func(v *corev1.PersistentVolume) {
					v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "data"}
				})}},
			want: []string{
				"volume reserved: claimRef=ns/data(uid-data) boundByController=false",
				"volume phase Bound",
				`claim data: volumeName="reserved" class= pv.kubernetes.io/bind-completed=yes pv.kubernetes.io/bound-by-controller=yes`,
				"claim phase Bound capacity=8Gi modes=RWO",
			},
		},
		{
			name:  "a claim without class gets the default class",
			claim: newClaim("data", "1Gi", noClass),
			world: fakeWorld{classes: []*storagev1.StorageClass{storageClass("std", "example.com/disk", storagev1.VolumeBindingImmediate, true)}},
			want:  []string{`claim data: volumeName="" class=std `},
		},
		{
			name:  "external provisioner is asked through the claim",
			claim: newClaim("data", "1Gi", class("fast")),
			world: fakeWorld{classes: []*storagev1.StorageClass{immediate}},
			want: []string{
				`claim data: volumeName="" class=fast volume.kubernetes.io/storage-provisioner=example.com/disk`,
				"event claim Normal ExternalProvisioning: " + fmt.Sprintf(provisioningMsg, "example.com/disk"),
			},
		},
		{
			name:  "missing class",
			claim: newClaim("data", "1Gi", class("gone")),
			want:  []string{`event claim Warning ProvisioningFailed: storageclass.storage.k8s.io "gone" not found`},
		},
		{
			name:  "in-tree provisioner kplane does not have",
			claim: newClaim("data", "1Gi", class("static")),
			world: fakeWorld{classes: []*storagev1.StorageClass{intree}},
			want:  []string{"event claim Warning ProvisioningFailed: no volume plugin matched name: kubernetes.io/no-provisioner"},
		},
		{
			name:  "wait for first consumer",
			claim: newClaim("data", "1Gi", class("local")),
			world: fakeWorld{classes: []*storagev1.StorageClass{wffc}, volumes: []*corev1.PersistentVolume{volume("local-1", "1Gi", volumeClass("local"))}},
			want:  []string{"event claim Normal WaitForFirstConsumer: waiting for first consumer to be created before binding"},
		},
		{
			name:  "wait for the pod to be scheduled",
			claim: newClaim("data", "1Gi", class("local")),
			world: fakeWorld{classes: []*storagev1.StorageClass{wffc}, pods: []*corev1.Pod{
				podUsing("web-0", "data", "", corev1.PodPending), podUsing("done", "data", "", corev1.PodSucceeded)}},
			want: []string{"event claim Normal WaitForPodScheduled: waiting for pod web-0 to be scheduled"},
		},
		{
			name:  "node selected: provision there",
			claim: newClaim("data", "1Gi", class("local"), annotated(pv.AnnSelectedNode, "n1")),
			world: fakeWorld{classes: []*storagev1.StorageClass{wffc}},
			want: []string{
				`claim data: volumeName="" class=local volume.kubernetes.io/storage-provisioner=kplane.io/local-path`,
				"event claim Normal ExternalProvisioning: " + fmt.Sprintf(provisioningMsg, "kplane.io/local-path"),
			},
		},
		{
			name:  "a volume the scheduler bound to a waiting claim is taken",
			claim: newClaim("data", "1Gi", class("local")),
			world: fakeWorld{classes: []*storagev1.StorageClass{wffc}, volumes: []*corev1.PersistentVolume{
				volume("local-1", "1Gi", volumeClass("local"), claimRef(data), volumeAnnotation(pv.AnnBoundByController, "yes"))}},
			want: []string{
				"volume phase Bound",
				`claim data: volumeName="local-1" class=local pv.kubernetes.io/bind-completed=yes pv.kubernetes.io/bound-by-controller=yes`,
				"claim phase Bound capacity=1Gi modes=RWO",
			},
		},
		{
			name:  "requested volume missing",
			claim: newClaim("data", "1Gi", wants("later")),
			want:  nil, // Pending already; it may be created later
		},
		{
			name:  "requested volume too small",
			claim: newClaim("data", "1Gi", wants("small")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("small", "10Mi")}},
			want:  []string{`event claim Warning VolumeMismatch: Cannot bind to requested volume "small": requested PV is too small`},
		},
		{
			name:  "requested volume of another class",
			claim: newClaim("data", "1Gi", wants("fast-1")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("fast-1", "10Gi", volumeClass("fast"))}},
			want:  []string{`event claim Warning VolumeMismatch: Cannot bind to requested volume "fast-1": storageClassName does not match`},
		},
		{
			name:  "requested volume is bound to another claim",
			claim: newClaim("data", "1Gi", wants("taken")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("taken", "1Gi", claimRef(newClaim("other", "1Gi")))}},
			want:  []string{`event claim Warning FailedBinding: volume "taken" already bound to a different claim.`},
		},
		{
			name:  "requested volume is free",
			claim: newClaim("data", "1Gi", wants("free")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("free", "1Gi")}},
			want: []string{
				"volume free: claimRef=ns/data(uid-data) boundByController=true",
				"volume phase Bound",
				`claim data: volumeName="free" class= pv.kubernetes.io/bind-completed=yes`,
				"claim phase Bound capacity=1Gi modes=RWO",
			},
		},
		{
			name: "bound claim, all well",
			claim: newClaim("data", "1Gi", boundTo("v1"), func(c *corev1.PersistentVolumeClaim) {
				c.Status.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
				c.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
			}),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("v1", "1Gi", claimRef(data), phase(corev1.VolumeBound))}},
			want:  nil,
		},
		{
			name:  "bound claim lost its volume",
			claim: newClaim("data", "1Gi", boundTo("v1")),
			want: []string{
				"claim phase Lost capacity=0 modes=",
				"event claim Warning ClaimLost: Bound claim has lost its PersistentVolume. Data on the volume is lost!",
			},
		},
		{
			name:  "lost stays lost quietly",
			claim: newClaim("data", "1Gi", boundTo("v1"), func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimLost }),
			want:  nil,
		},
		{
			name:  "bound claim whose volume belongs to another",
			claim: newClaim("data", "1Gi", boundTo("v1")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("v1", "1Gi", claimRef(newClaim("other", "1Gi")), phase(corev1.VolumeBound))}},
			want: []string{
				"claim phase Lost capacity=0 modes=",
				"event claim Warning ClaimMisbound: Two claims are bound to the same volume, this one is bound incorrectly",
			},
		},
		{
			name:  "bound claim whose volume came unbound is bound again",
			claim: newClaim("data", "1Gi", boundTo("v1")),
			world: fakeWorld{volumes: []*corev1.PersistentVolume{volume("v1", "1Gi")}},
			want: []string{
				"volume v1: claimRef=ns/data(uid-data) boundByController=true",
				"volume phase Bound",
				"claim phase Bound capacity=0 modes=RWO",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, syncClaim(tc.claim, tc.world), tc.want)
		})
	}
}

func TestSyncVolume(t *testing.T) {
	data := newClaim("data", "1Gi")
	boundData := newClaim("data", "1Gi", boundTo("v1"))
	released := func(opts ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		return volume("v1", "1Gi", append([]func(*corev1.PersistentVolume){claimRef(data), phase(corev1.VolumeBound),
			volumeAnnotation(pv.AnnBoundByController, "yes")}, opts...)...)
	}
	transitioned := func(ago time.Duration) func(*corev1.PersistentVolume) {
		return func(v *corev1.PersistentVolume) {
			v.Status.LastPhaseTransitionTime = new(metav1.NewTime(time.Now().Add(-ago)))
		}
	}
	recyclerAt := func(ph corev1.PodPhase, msg string, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "recycler-for-v1", Namespace: "default", UID: "rp", CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.PodStatus{Phase: ph, Message: msg}}
	}
	recycler := func(ph corev1.PodPhase, msg string) *corev1.Pod { return recyclerAt(ph, msg, time.Now()) }
	for _, tc := range []struct {
		name   string
		volume *corev1.PersistentVolume
		claim  *corev1.PersistentVolumeClaim
		world  fakeWorld
		want   []string
	}{
		{"new volume becomes Available", volume("v1", "1Gi", phase(corev1.VolumePending)), nil, fakeWorld{}, []string{"volume phase Available"}},
		{"pre-bound volume is Available", volume("v1", "1Gi", phase(corev1.VolumePending), func(v *corev1.PersistentVolume) {
			v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "data"}
		}), nil, fakeWorld{}, []string{"volume phase Available"}},
		{"bound both ways", volume("v1", "1Gi", claimRef(data), phase(corev1.VolumeAvailable)), boundData, fakeWorld{}, []string{"volume phase Bound"}},
		{"claim side pending: sync the claim", volume("v1", "1Gi", claimRef(data), phase(corev1.VolumeBound)), data, fakeWorld{},
			[]string{"sync claim ns/data"}},
		{"claim replaced by a namesake: released", released(), newClaim("data", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.UID = "new" }), fakeWorld{},
			[]string{"volume phase Released"}},
		{"Retain: released and kept", released(), nil, fakeWorld{}, []string{"volume phase Released"}},
		{"Retain: stays released quietly", released(phase(corev1.VolumeReleased)), nil, fakeWorld{}, nil},
		{"Delete by an external provisioner: released, left to it", released(policy(corev1.PersistentVolumeReclaimDelete),
			volumeAnnotation(pv.AnnDynamicallyProvisioned, "kplane.io/local-path")), nil, fakeWorld{}, []string{"volume phase Released"}},
		{"Delete without a deleter fails", released(policy(corev1.PersistentVolumeReclaimDelete)), nil, fakeWorld{}, []string{
			`volume phase Failed error getting deleter volume plugin for volume "v1": no deletable volume plugin matched`,
			`event volume Warning VolumeFailedDelete: error getting deleter volume plugin for volume "v1": no deletable volume plugin matched`,
		}},
		{"unknown policy", released(policy("Shred")), nil, fakeWorld{}, []string{
			"volume phase Failed Volume has unrecognized PersistentVolumeReclaimPolicy",
			"event volume Warning VolumeUnknownReclaimPolicy: Volume has unrecognized PersistentVolumeReclaimPolicy",
		}},
		{"provisioned volume whose claim bound elsewhere is deleted", released(policy(corev1.PersistentVolumeReclaimDelete),
			volumeAnnotation(pv.AnnDynamicallyProvisioned, "kplane.io/local-path")), newClaim("data", "1Gi", boundTo("v2")), fakeWorld{},
			[]string{"volume phase Released"}},
		{"volume the binder bound to a claim that went elsewhere is unbound", released(), newClaim("data", "1Gi", boundTo("v2")), fakeWorld{},
			[]string{"volume v1: claimRef=nil boundByController=false", "volume phase Available"}},
		{"pre-bound volume whose claim went elsewhere keeps the name", volume("v1", "1Gi", claimRef(data), phase(corev1.VolumeBound)),
			newClaim("data", "1Gi", boundTo("v2")), fakeWorld{},
			[]string{"volume v1: claimRef=ns/data() boundByController=false", "volume phase Available"}},
		{"Recycle: starts the recycler", released(policy(corev1.PersistentVolumeReclaimRecycle)), nil, fakeWorld{},
			[]string{"volume phase Released", "create recycler recycler-for-v1"}},
		{"Recycle: waits for the pods still using the claim", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeReleased)), nil,
			fakeWorld{pods: []*corev1.Pod{podUsing("old", "data", "n1", corev1.PodRunning), podUsing("done", "data", "n1", corev1.PodSucceeded)}},
			[]string{"event volume Normal VolumeFailedRecycle: Volume is used by pods: ns/old"}},
		{"Recycle: scrubbing", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeReleased)), nil,
			fakeWorld{pods: []*corev1.Pod{recycler(corev1.PodRunning, "")}}, nil},
		{"Recycle: success makes it Available", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeReleased)), nil,
			fakeWorld{pods: []*corev1.Pod{recycler(corev1.PodSucceeded, "")}},
			[]string{"volume v1: claimRef=nil boundByController=false", "volume phase Available", "event volume Normal VolumeRecycled: Volume recycled",
				"delete recycler recycler-for-v1"}},
		{"Recycle: failure makes it Failed", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeReleased)), nil,
			fakeWorld{pods: []*corev1.Pod{recycler(corev1.PodFailed, "scrub: permission denied")}},
			[]string{"volume phase Failed Recycle failed: failed to recycle volume: scrub: permission denied",
				"event volume Warning VolumeFailedRecycle: Recycle failed: failed to recycle volume: scrub: permission denied",
				"delete recycler recycler-for-v1", "recycle failed"}},
		{"Recycle: a failed volume waits for its backoff", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeFailed)), nil,
			fakeWorld{waiting: true}, nil},
		{"Recycle: a failed volume is tried again", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeFailed)), nil,
			fakeWorld{}, []string{"create recycler recycler-for-v1"}},
		{"Recycle: a recycler from before the release is stale", released(policy(corev1.PersistentVolumeReclaimRecycle), phase(corev1.VolumeReleased),
			transitioned(time.Minute)), nil, fakeWorld{pods: []*corev1.Pod{recyclerAt(corev1.PodSucceeded, "", time.Now().Add(-time.Hour))}},
			[]string{"delete recycler recycler-for-v1"}},
		{"Recycle: only hostPath", released(policy(corev1.PersistentVolumeReclaimRecycle), func(v *corev1.PersistentVolume) {
			v.Spec.HostPath, v.Spec.Local = nil, &corev1.LocalVolumeSource{Path: "/mnt"}
		}), nil, fakeWorld{}, []string{"volume phase Failed No recycler plugin found for the volume!",
			"event volume Warning VolumeFailedRecycle: No recycler plugin found for the volume!", "recycle failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, syncVolume(tc.volume, tc.claim, tc.world), tc.want)
		})
	}
}

func TestRecyclerPod(t *testing.T) {
	v := volume("v1", "10Gi", func(v *corev1.PersistentVolume) {
		v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}
	})
	p := recyclerPod(v)
	c := p.Spec.Containers[0]
	switch {
	case p.Name != "recycler-for-v1" || p.Namespace != "default":
		t.Errorf("name %s/%s", p.Namespace, p.Name)
	case *p.Spec.ActiveDeadlineSeconds != 300:
		t.Errorf("deadline %d, want 300 (30s per GiB)", *p.Spec.ActiveDeadlineSeconds)
	case p.Spec.Volumes[0].HostPath.Path != "/data/v1" || c.VolumeMounts[0].MountPath != "/scrub":
		t.Errorf("volume %+v mounted at %s", p.Spec.Volumes[0], c.VolumeMounts[0].MountPath)
	case p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "n1":
		t.Errorf("affinity %+v", p.Spec.Affinity)
	case p.Spec.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("restart policy %s", p.Spec.RestartPolicy)
	}
	if small := recyclerPod(volume("v2", "1Gi")); *small.Spec.ActiveDeadlineSeconds != 60 || small.Spec.Affinity != nil {
		t.Errorf("small volume: deadline %d, affinity %v", *small.Spec.ActiveDeadlineSeconds, small.Spec.Affinity)
	}
}
