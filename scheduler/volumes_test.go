package scheduler

import (
	"slices"
	"testing"

	"github.com/kplane/kplane/internal/placement"
	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

func requirement(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func selectorOf(terms ...corev1.NodeSelectorTerm) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: terms}
}

func TestMatchNodeSelector(t *testing.T) {
	n := node("n1", func(n *corev1.Node) { n.Labels = map[string]string{"zone": "a", "cores": "8"} })
	for _, tc := range []struct {
		name string
		sel  *corev1.NodeSelector
		want bool
	}{
		{"In", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", corev1.NodeSelectorOpIn, "a", "b")}}), true},
		{"In, other value", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", corev1.NodeSelectorOpIn, "b")}}), false},
		{"NotIn", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", corev1.NodeSelectorOpNotIn, "b")}}), true},
		{"Exists", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", corev1.NodeSelectorOpExists)}}), true},
		{"DoesNotExist", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("gpu", corev1.NodeSelectorOpDoesNotExist)}}), true},
		{"Gt", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("cores", corev1.NodeSelectorOpGt, "4")}}), true},
		{"Lt", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("cores", corev1.NodeSelectorOpLt, "4")}}), false},
		{"Gt with a word", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("cores", corev1.NodeSelectorOpGt, "many")}}), false},
		{"all expressions of a term", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			requirement("zone", corev1.NodeSelectorOpIn, "a"), requirement("cores", corev1.NodeSelectorOpIn, "16")}}), false},
		{"any term", selectorOf(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", corev1.NodeSelectorOpIn, "b")}},
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{requirement(metav1.ObjectNameField, corev1.NodeSelectorOpIn, "n1")}}), true},
		{"field of another node", selectorOf(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			requirement(metav1.ObjectNameField, corev1.NodeSelectorOpIn, "n2")}}), false},
		{"empty term matches nothing", selectorOf(corev1.NodeSelectorTerm{}), false},
		{"unknown operator", selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", "Near", "a")}}), false},
	} {
		if got := placement.MatchNodeSelector(tc.sel, n); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	pod := podWith(nil)
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: selectorOf(
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement("zone", corev1.NodeSelectorOpIn, "b")}})}}
	if got := Fits(pod, n); got != reasonSelector {
		t.Errorf("required node affinity: Fits = %q, want %q", got, reasonSelector)
	}
}

// lookup is a volumeLookup of plain slices.
type lookup struct {
	claims  []*corev1.PersistentVolumeClaim
	volumes []*corev1.PersistentVolume
	classes []*storagev1.StorageClass
}

func (l lookup) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	for _, c := range l.claims {
		if c.Namespace == ns && c.Name == name {
			return c
		}
	}
	return nil
}
func (l lookup) Volume(name string) *corev1.PersistentVolume {
	for _, v := range l.volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}
func (l lookup) Volumes() []*corev1.PersistentVolume { return l.volumes }
func (l lookup) Class(name string) *storagev1.StorageClass {
	for _, c := range l.classes {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func claimOf(name, class, size string, opts ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: new(class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	for _, o := range opts {
		o(c)
	}
	return c
}

func boundClaim(volume string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Spec.VolumeName, c.Status.Phase = volume, corev1.ClaimBound
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, pv.AnnBindCompleted, "yes")
	}
}

func volumeOn(name, class, size, host string) *corev1.PersistentVolume {
	v := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	if host != "" {
		v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: selectorOf(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			requirement(corev1.LabelHostname, corev1.NodeSelectorOpIn, host)}})}
	}
	return v
}

func classOf(name, provisioner string, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
}

func podUsing(claims ...string) *corev1.Pod {
	p := podWith(nil)
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

func hostNode(name string) *corev1.Node {
	return node(name, func(n *corev1.Node) { n.Labels = map[string]string{corev1.LabelHostname: name} })
}

func TestClaimsOf(t *testing.T) {
	now := metav1.Now()
	wffc := classOf("local", "kplane.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer)
	l := lookup{classes: []*storagev1.StorageClass{wffc}, claims: []*corev1.PersistentVolumeClaim{
		claimOf("bound", "", "1Gi", boundClaim("v1")),
		claimOf("waiting", "local", "1Gi"),
		claimOf("immediate", "", "1Gi"),
		claimOf("prebound", "local", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "v9" }),
		claimOf("lost", "", "1Gi", boundClaim("v2"), func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimLost }),
		claimOf("going", "", "1Gi", func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &now }),
	}}
	for _, tc := range []struct {
		name           string
		pod            *corev1.Pod
		bound, delayed int
		reason         string
	}{
		{"no claims", podWith(nil), 0, 0, ""},
		{"bound and waiting", podUsing("bound", "waiting"), 1, 1, ""},
		{"missing", podUsing("bound", "nope"), 0, 0, `persistentvolumeclaim "nope" not found`},
		{"immediate unbound", podUsing("immediate"), 0, 0, msgUnboundImmediate},
		{"pre-bound by name is the binder's", podUsing("prebound"), 0, 0, msgUnboundImmediate},
		{"lost", podUsing("lost"), 0, 0, `persistentvolumeclaim "lost" bound to non-existent persistentvolume "v2"`},
		{"being deleted", podUsing("going"), 0, 0, `persistentvolumeclaim "going" is being deleted`},
	} {
		pc, reason := claimsOf(tc.pod, l)
		if reason != tc.reason || reason == "" && (len(pc.bound) != tc.bound || len(pc.delayed) != tc.delayed) {
			t.Errorf("%s: %d bound, %d delayed, reason %q", tc.name, len(pc.bound), len(pc.delayed), reason)
		}
	}
}

func TestVolumesFit(t *testing.T) {
	wffc := classOf("local", "kplane.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer)
	static := classOf("static", pv.NoProvisioner, storagev1.VolumeBindingWaitForFirstConsumer)
	a, b := hostNode("a"), hostNode("b")
	everyNode := func(string) bool { return true }
	for _, tc := range []struct {
		name      string
		claims    podClaims
		l         lookup
		node      *corev1.Node
		reasons   []string
		bind      []string // "claim=volume"
		provision []string
	}{
		{"bound volume on the node", podClaims{bound: []*corev1.PersistentVolumeClaim{claimOf("c", "", "1Gi", boundClaim("v"))}},
			lookup{volumes: []*corev1.PersistentVolume{volumeOn("v", "", "1Gi", "a")}}, a, nil, nil, nil},
		{"bound volume elsewhere", podClaims{bound: []*corev1.PersistentVolumeClaim{claimOf("c", "", "1Gi", boundClaim("v"))}},
			lookup{volumes: []*corev1.PersistentVolume{volumeOn("v", "", "1Gi", "a")}}, b, []string{reasonNodeConflict}, nil, nil},
		{"bound volume gone", podClaims{bound: []*corev1.PersistentVolumeClaim{claimOf("c", "", "1Gi", boundClaim("v"))}},
			lookup{}, a, []string{reasonPVNotExist}, nil, nil},
		{"an Available volume on the node is preferred", podClaims{delayed: []*corev1.PersistentVolumeClaim{claimOf("c", "local", "1Gi")}},
			lookup{classes: []*storagev1.StorageClass{wffc}, volumes: []*corev1.PersistentVolume{volumeOn("far", "local", "1Gi", "b"), volumeOn("near", "local", "2Gi", "a")}},
			a, nil, []string{"c=near"}, nil},
		{"no volume: provision on the node", podClaims{delayed: []*corev1.PersistentVolumeClaim{claimOf("c", "local", "1Gi")}},
			lookup{classes: []*storagev1.StorageClass{wffc}, volumes: []*corev1.PersistentVolume{volumeOn("far", "local", "1Gi", "b")}},
			a, nil, nil, []string{"c"}},
		{"no volume and no provisioner", podClaims{delayed: []*corev1.PersistentVolumeClaim{claimOf("c", "static", "1Gi")}},
			lookup{classes: []*storagev1.StorageClass{static}, volumes: []*corev1.PersistentVolume{volumeOn("far", "static", "1Gi", "b")}},
			a, []string{reasonBindConflict}, nil, nil},
		{"two claims never share a volume", podClaims{delayed: []*corev1.PersistentVolumeClaim{claimOf("big", "static", "2Gi"), claimOf("small", "static", "1Gi")}},
			lookup{classes: []*storagev1.StorageClass{static}, volumes: []*corev1.PersistentVolume{volumeOn("v2", "static", "2Gi", "a"), volumeOn("v3", "static", "3Gi", "a")}},
			a, nil, []string{"small=v2", "big=v3"}, nil},
		{"provisioning started on another node", podClaims{delayed: []*corev1.PersistentVolumeClaim{claimOf("c", "local", "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{pv.AnnSelectedNode: "b"}
		})}}, lookup{classes: []*storagev1.StorageClass{wffc}}, a, []string{reasonBindConflict}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reasons, plan := volumesFit(tc.claims, tc.node, tc.l, everyNode)
			var bind, provision []string
			for _, b := range plan.bind {
				bind = append(bind, b.claim.Name+"="+b.volume.Name)
			}
			for _, c := range plan.provision {
				provision = append(provision, c.Name)
			}
			if !slices.Equal(reasons, tc.reasons) || !slices.Equal(bind, tc.bind) || !slices.Equal(provision, tc.provision) {
				t.Errorf("reasons %q bind %q provision %q; want %q %q %q", reasons, bind, provision, tc.reasons, tc.bind, tc.provision)
			}
		})
	}
}
