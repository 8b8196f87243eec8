package statefulset

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/controller/revision"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The pure tests: names and ordinals, claim owners, and which step each policy takes next.

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testSet(replicas int32, change func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	l := map[string]string{"app": "web"}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "set-uid"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         "web-svc",
			Selector:            &metav1.LabelSelector{MatchLabels: l},
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(0))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "v2"}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: map[string]string{"tier": "db"}},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
		},
	}
	if change != nil {
		change(ss)
	}
	return ss
}

// state describes a pod for these tests: "ready" (running, ready for an hour), "running"
// (not ready), "pending", "failed", "terminating" (ready, being deleted).
func pod(set *appsv1.StatefulSet, ordinal int, revision, state string) *corev1.Pod {
	p := newPod(set, &set.Spec.Template, revision, ordinal)
	p.UID = types.UID(p.Name + "-uid")
	switch state {
	case "ready", "terminating":
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
		if state == "terminating" {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
	case "running":
		p.Status.Phase = corev1.PodRunning
	case "pending":
		p.Status.Phase = corev1.PodPending
	case "failed":
		p.Status.Phase = corev1.PodFailed
	}
	return p
}

// withClaims gives the view every claim the set's pods of ordinals would have, owned as the
// policy says.
func claimsFor(set *appsv1.StatefulSet, pods ...*corev1.Pod) map[string]*corev1.PersistentVolumeClaim {
	out := map[string]*corev1.PersistentVolumeClaim{}
	for _, p := range pods {
		for i := range set.Spec.VolumeClaimTemplates {
			c := newClaim(set, &set.Spec.VolumeClaimTemplates[i], ordinalOf(p))
			c.OwnerReferences, _, _ = claimOwners(set, p, c)
			out[c.Name] = c
		}
	}
	return out
}

func planOf(set *appsv1.StatefulSet, pods ...*corev1.Pod) plan {
	return makePlan(&view{set: set, pods: pods, claims: claimsFor(set, pods...),
		current: &set.Spec.Template, update: &set.Spec.Template, currentRevision: "old", updateRev: "new", now: now})
}

// describe renders the plan's steps as "create web-0", "delete web-2", ...
func describe(p plan) []string {
	var out []string
	for _, s := range p.steps() {
		out = append(out, s.kind.String()+" "+s.pod.Name)
	}
	return out
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parent  string
		ordinal int
		ok      bool
	}{
		{"web-0", "web", 0, true}, {"web-12", "web", 12, true}, {"my-db-3", "my-db", 3, true},
		{"web-01", "", -1, false}, {"web", "", -1, false}, {"web-", "", -1, false}, {"-1", "", -1, false},
		{"web-x", "", -1, false}, {"web-99999999999", "", -1, false},
	} {
		parent, ordinal, ok := parseName(tc.name)
		if parent != tc.parent || ordinal != tc.ordinal || ok != tc.ok {
			t.Errorf("parseName(%q) = %q %d %v, want %q %d %v", tc.name, parent, ordinal, ok, tc.parent, tc.ordinal, tc.ok)
		}
	}
	set := testSet(3, func(ss *appsv1.StatefulSet) { ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 5} })
	var in []int
	for o := range 10 {
		if inRange(set, o) {
			in = append(in, o)
		}
	}
	if !slices.Equal(in, []int{5, 6, 7}) {
		t.Errorf("ordinals of 3 from 5: %v", in)
	}
	if got := claimName(set, "data", 6); got != "data-web-6" {
		t.Errorf("claim name %q", got)
	}
	if isMember(set, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "webby-1"}}) || !isMember(set, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-9"}}) {
		t.Error("membership by name")
	}
}

func TestNewPod(t *testing.T) {
	set := testSet(3, nil)
	p := newPod(set, &set.Spec.Template, "web-abc", 2)
	if p.Name != "web-2" || p.Namespace != "ns" || p.Spec.Hostname != "web-2" || p.Spec.Subdomain != "web-svc" {
		t.Errorf("identity: %s/%s hostname %q subdomain %q", p.Namespace, p.Name, p.Spec.Hostname, p.Spec.Subdomain)
	}
	for k, v := range map[string]string{"app": "web", appsv1.StatefulSetPodNameLabel: "web-2", appsv1.PodIndexLabel: "2", appsv1.StatefulSetRevisionLabel: "web-abc"} {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if set.Spec.Template.Labels[appsv1.StatefulSetPodNameLabel] != "" {
		t.Error("the template's labels were changed")
	}
	// The claim's volume replaces the template's volume of its name and comes first.
	var vols []string
	for _, v := range p.Spec.Volumes {
		s := v.Name
		if v.PersistentVolumeClaim != nil {
			s += "=" + v.PersistentVolumeClaim.ClaimName
		}
		vols = append(vols, s)
	}
	if !slices.Equal(vols, []string{"data=data-web-2", "cache"}) {
		t.Errorf("volumes %v", vols)
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != "set-uid" || ref.Kind != "StatefulSet" {
		t.Errorf("owner %+v", ref)
	}
	c := newClaim(set, &set.Spec.VolumeClaimTemplates[0], 2)
	if c.Name != "data-web-2" || c.Labels["app"] != "web" || c.Labels["tier"] != "db" {
		t.Errorf("claim %s labels %v", c.Name, c.Labels)
	}
}

func TestClaimOwners(t *testing.T) {
	const retain, del = appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	for _, tc := range []struct {
		whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType
		ordinal                 int
		want                    []string // owner UIDs
	}{
		{retain, retain, 0, nil},
		{retain, retain, 5, nil},
		{del, retain, 0, []string{"set-uid"}},
		{del, retain, 5, []string{"set-uid"}},
		{retain, del, 0, nil},
		{retain, del, 5, []string{"web-5-uid"}},
		{del, del, 0, []string{"set-uid"}},
		{del, del, 5, []string{"web-5-uid"}},
	} {
		set := testSet(3, func(ss *appsv1.StatefulSet) {
			ss.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: tc.whenDeleted, WhenScaled: tc.whenScaled}
		})
		p := pod(set, tc.ordinal, "new", "ready")
		c := newClaim(set, &set.Spec.VolumeClaimTemplates[0], tc.ordinal)
		// It starts with the other policy's owners and someone else's plain reference.
		other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "cm-uid"}
		c.OwnerReferences = []metav1.OwnerReference{other, {APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}}
		refs, change, conflict := claimOwners(set, p, c)
		var got []string
		for _, r := range refs {
			if r.UID != "cm-uid" {
				got = append(got, string(r.UID))
				if r.Controller == nil || !*r.Controller {
					t.Errorf("%s/%s ordinal %d: owner %s not a controller", tc.whenDeleted, tc.whenScaled, tc.ordinal, r.UID)
				}
			}
		}
		if !slices.Equal(got, tc.want) || conflict || !change || !slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == "cm-uid" }) {
			t.Errorf("%s/%s ordinal %d: owners %v (change %v, conflict %v), want %v", tc.whenDeleted, tc.whenScaled, tc.ordinal, got, change, conflict, tc.want)
		}
		c.OwnerReferences = refs
		if _, again, _ := claimOwners(set, p, c); again {
			t.Errorf("%s/%s ordinal %d: not settled after one change", tc.whenDeleted, tc.whenScaled, tc.ordinal)
		}
	}
	// Another controller: our references come off, none go on; a reference to an earlier pod
	// of the name leaves the claim alone.
	set := testSet(3, func(ss *appsv1.StatefulSet) {
		ss.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: del, WhenScaled: del}
	})
	p := pod(set, 1, "new", "ready")
	c := newClaim(set, &set.Spec.VolumeClaimTemplates[0], 1)
	yes := true
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: &yes}}
	if refs, change, conflict := claimOwners(set, p, c); len(refs) != 1 || change || !conflict {
		t.Errorf("other controller: %v change %v conflict %v", refs, change, conflict)
	}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-1", UID: "earlier", Controller: &yes}}
	if _, change, _ := claimOwners(set, p, c); change {
		t.Error("a claim of an earlier pod was changed")
	}
}

func TestPlanOrderedReady(t *testing.T) {
	set := testSet(3, nil)
	for _, tc := range []struct {
		name    string
		set     *appsv1.StatefulSet
		pods    []*corev1.Pod
		want    []string
		waiting string
	}{
		{"first pod first", set, nil, []string{"create web-0"}, ""},
		{"one at a time", set, []*corev1.Pod{pod(set, 0, "new", "pending")}, nil, "web-0 to be running and ready"},
		{"running is not ready", set, []*corev1.Pod{pod(set, 0, "new", "running")}, nil, "web-0 to be running and ready"},
		{"next once ready", set, []*corev1.Pod{pod(set, 0, "new", "ready")}, []string{"create web-1"}, ""},
		{"a gap is filled first", set, []*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 2, "new", "ready")}, []string{"create web-1"}, ""},
		{"failed pod replaced", set, []*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "failed")}, []string{"delete web-1"}, "web-1 to be replaced"},
		{"terminating waits", set, []*corev1.Pod{pod(set, 0, "new", "terminating")}, nil, "web-0 to terminate"},
		{"scale down highest first", testSet(1, nil),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "ready"), pod(set, 2, "new", "ready")}, []string{"delete web-2"}, ""},
		{"scale down one at a time", testSet(1, nil),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "ready"), pod(set, 2, "new", "terminating")}, nil, "web-2 to terminate"},
		{"the lowest unhealthy pod may go", testSet(1, nil),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "running")}, []string{"delete web-1"}, ""},
		{"not while another is unhealthy", testSet(1, nil),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "running"), pod(set, 2, "new", "running")}, nil,
			"web-2 to be running and ready before scaling down"},
		{"no scale down before the rest is ready", testSet(2, nil),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "pending"), pod(set, 2, "new", "ready")}, nil, "web-1 to be running and ready"},
		{"ordinals from start", testSet(2, func(ss *appsv1.StatefulSet) { ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 3} }),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 3, "new", "ready")}, []string{"create web-4"}, ""},
		{"old start's pods go once the new ones run", testSet(1, func(ss *appsv1.StatefulSet) { ss.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 3} }),
			[]*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 3, "new", "ready")}, []string{"delete web-0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planOf(tc.set, tc.pods...)
			if got := describe(p); !slices.Equal(got, tc.want) || p.waiting != tc.waiting {
				t.Errorf("steps %q waiting %q, want %q waiting %q", got, p.waiting, tc.want, tc.waiting)
			}
		})
	}
}

func TestPlanParallel(t *testing.T) {
	parallel := func(n int32) *appsv1.StatefulSet {
		return testSet(n, func(ss *appsv1.StatefulSet) { ss.Spec.PodManagementPolicy = appsv1.ParallelPodManagement })
	}
	set := parallel(3)
	for _, tc := range []struct {
		name string
		set  *appsv1.StatefulSet
		pods []*corev1.Pod
		want []string
	}{
		{"all at once", set, nil, []string{"create web-0", "create web-1", "create web-2"}},
		{"without waiting", set, []*corev1.Pod{pod(set, 0, "new", "pending")}, []string{"create web-1", "create web-2"}},
		{"failed replaced beside the rest", set, []*corev1.Pod{pod(set, 0, "new", "failed"), pod(set, 1, "new", "pending")},
			[]string{"delete web-0", "create web-2"}},
		{"scale down at once", parallel(0), []*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "pending"), pod(set, 2, "new", "ready")},
			[]string{"delete web-2", "delete web-1", "delete web-0"}},
		{"terminating ones are left to finish", parallel(1), []*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "ready"), pod(set, 2, "new", "terminating")},
			[]string{"delete web-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(planOf(tc.set, tc.pods...)); !slices.Equal(got, tc.want) {
				t.Errorf("steps %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlanRollingUpdate(t *testing.T) {
	withPartition := func(n int32) *appsv1.StatefulSet {
		return testSet(3, func(ss *appsv1.StatefulSet) { ss.Spec.UpdateStrategy.RollingUpdate.Partition = &n })
	}
	withMaxUnavailable := func(v intstr.IntOrString) *appsv1.StatefulSet {
		return testSet(4, func(ss *appsv1.StatefulSet) { ss.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &v })
	}
	set := testSet(3, nil)
	four := testSet(4, nil)
	onDelete := testSet(3, func(ss *appsv1.StatefulSet) {
		ss.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	})
	all := func(set *appsv1.StatefulSet, revs ...string) []*corev1.Pod {
		var out []*corev1.Pod
		for i, r := range revs {
			state := "ready"
			if i, ok := strings.CutSuffix(r, "?"); ok {
				r, state = i, "running"
			}
			out = append(out, pod(set, i, r, state))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		set     *appsv1.StatefulSet
		pods    []*corev1.Pod
		want    []string
		waiting string
	}{
		{"highest ordinal first", set, all(set, "old", "old", "old"), []string{"delete web-2"}, ""},
		{"then the next", set, all(set, "old", "old", "new"), []string{"delete web-1"}, ""},
		{"once the last is ready", set, all(set, "old", "old", "new?"), nil, "web-2 to be running and ready"},
		{"down to the partition", withPartition(1), all(set, "old", "old", "new"), []string{"delete web-1"}, ""},
		{"not below it", withPartition(1), all(set, "old", "new", "new"), nil, ""},
		{"a partition above the replicas updates none", withPartition(5), all(set, "old", "old", "old"), nil, ""},
		{"done", set, all(set, "new", "new", "new"), nil, ""},
		{"OnDelete deletes nothing", onDelete, all(set, "old", "old", "old"), nil, ""},
		{"maxUnavailable 2", withMaxUnavailable(intstr.FromInt32(2)), all(four, "old", "old", "old", "old"),
			[]string{"delete web-3", "delete web-2"}, ""},
		{"ordered still waits for each pod", withMaxUnavailable(intstr.FromInt32(2)), all(four, "old", "old", "old", "new?"),
			nil, "web-3 to be running and ready"},
		{"maxUnavailable 50%, one down already", withMaxUnavailable(intstr.FromString("50%")), all(four, "old", "old", "new?", "new?"),
			nil, "web-2 to be running and ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planOf(tc.set, tc.pods...)
			if got := describe(p); !slices.Equal(got, tc.want) || p.waiting != tc.waiting {
				t.Errorf("steps %q waiting %q, want %q waiting %q", got, p.waiting, tc.want, tc.waiting)
			}
		})
	}
	// Parallel rolls out without waiting for the ordered checks; maxUnavailable still bounds it.
	par := withMaxUnavailable(intstr.FromString("50%"))
	par.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	if got := describe(planOf(par, all(four, "old", "old", "new?", "new?")...)); got != nil {
		t.Errorf("parallel, 50%% of 4 down: %q", got)
	}
	if got := describe(planOf(par, all(four, "old", "old", "old", "new?")...)); !slices.Equal(got, []string{"delete web-2"}) {
		t.Errorf("parallel, 50%% of 4, one down: %q", got)
	}
	// A pod made again below the partition is of the current revision, above it of the update.
	part := withPartition(2)
	v := &view{set: part, claims: map[string]*corev1.PersistentVolumeClaim{}, current: &corev1.PodTemplateSpec{}, update: &part.Spec.Template,
		currentRevision: "old", updateRev: "new", now: now}
	for o, want := range map[int]string{0: "old", 1: "old", 2: "new"} {
		if _, rev := v.templateFor(o); rev != want {
			t.Errorf("ordinal %d made from %s, want %s", o, rev, want)
		}
	}
	v.set = onDelete
	if _, rev := v.templateFor(0); rev != "new" {
		t.Errorf("OnDelete: ordinal 0 made from %s", rev)
	}
}

func TestPlanClaims(t *testing.T) {
	scaledDelete := testSet(2, func(ss *appsv1.StatefulSet) {
		ss.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
	})
	// A claim still owned by an earlier web-1 holds web-1 back, and the plan asks to look again.
	web0 := pod(scaledDelete, 0, "new", "ready")
	earlier := pod(scaledDelete, 1, "new", "ready")
	claims := claimsFor(scaledDelete, web0)
	stale := newClaim(scaledDelete, &scaledDelete.Spec.VolumeClaimTemplates[0], 1)
	stale.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-1", UID: earlier.UID}}
	claims[stale.Name] = stale
	p := makePlan(&view{set: scaledDelete, pods: []*corev1.Pod{web0}, claims: claims, current: &scaledDelete.Spec.Template,
		update: &scaledDelete.Spec.Template, currentRevision: "new", updateRev: "new", now: now})
	if got := describe(p); got != nil || !p.retry {
		t.Errorf("stale claim: steps %q retry %v", got, p.retry)
	}
	// A scaled-down pod's claims get the pod as owner before it is deleted.
	one := testSet(1, func(ss *appsv1.StatefulSet) {
		ss.Spec.PersistentVolumeClaimRetentionPolicy = scaledDelete.Spec.PersistentVolumeClaimRetentionPolicy
	})
	p = makePlan(&view{set: one, pods: []*corev1.Pod{web0, earlier}, claims: claimsFor(scaledDelete, web0, earlier),
		current: &one.Spec.Template, update: &one.Spec.Template, currentRevision: "new", updateRev: "new", now: now})
	if got := describe(p); !slices.Equal(got, []string{"fix claims web-1", "delete web-1"}) {
		t.Errorf("scale down with whenScaled Delete: %q", got)
	}
	// A pending pod whose claim is missing gets it back before the wait.
	pending := pod(scaledDelete, 0, "new", "pending")
	p = makePlan(&view{set: scaledDelete, pods: []*corev1.Pod{pending}, claims: map[string]*corev1.PersistentVolumeClaim{},
		current: &scaledDelete.Spec.Template, update: &scaledDelete.Spec.Template, currentRevision: "new", updateRev: "new", now: now})
	if got := describe(p); !slices.Equal(got, []string{"fix web-0"}) || p.waiting == "" {
		t.Errorf("pending without its claim: %q waiting %q", got, p.waiting)
	}
}

func TestStatus(t *testing.T) {
	set := testSet(3, nil)
	set.Generation = 4
	h := &history{current: &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "old"}},
		update: &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, collisions: 1}
	st := computeStatus(set, h, []*corev1.Pod{pod(set, 0, "old", "ready"), pod(set, 1, "new", "running"), pod(set, 2, "new", "terminating")}, now)
	if st.Replicas != 3 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 || st.CurrentReplicas != 1 || st.UpdatedReplicas != 1 ||
		st.CurrentRevision != "old" || st.UpdateRevision != "new" || st.ObservedGeneration != 4 || deref(st.CollisionCount) != 1 {
		t.Errorf("mid-rollout status %+v", st)
	}
	// Every pod updated and ready: the update revision becomes the current one.
	st = computeStatus(set, h, []*corev1.Pod{pod(set, 0, "new", "ready"), pod(set, 1, "new", "ready"), pod(set, 2, "new", "ready")}, now)
	if st.CurrentRevision != "new" || st.CurrentReplicas != 3 || st.UpdatedReplicas != 3 {
		t.Errorf("completed rollout status %+v", st)
	}
	// minReadySeconds: ready for an hour is available for 60 s, not for two hours.
	set.Spec.MinReadySeconds = 7200
	st = computeStatus(set, h, []*corev1.Pod{pod(set, 0, "new", "ready")}, now)
	if st.ReadyReplicas != 1 || st.AvailableReplicas != 0 {
		t.Errorf("minReadySeconds: %+v", st)
	}
	if d := nextAvailable([]*corev1.Pod{pod(set, 0, "new", "ready")}, 7200, now); d < time.Hour || d > time.Hour+time.Second {
		t.Errorf("next availability in %v, want an hour", d)
	}
}

func TestRevisionData(t *testing.T) {
	set := testSet(1, nil)
	data, err := templatePatch(&set.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), `{"spec":{"template":{"$patch":"replace",`) {
		t.Errorf("patch %s", data)
	}
	back, err := templateOf(&appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: data}})
	if err != nil || back.Spec.Containers[0].Image != "v2" || back.Labels["app"] != "web" {
		t.Errorf("template back: %+v, %v", back, err)
	}
	if a, b := revisionHash(data, 0), revisionHash(data, 1); a == b || a != revisionHash(data, 0) {
		t.Errorf("hashes %q %q", a, b)
	}
	if !revision.SameData([]byte(`{"a":1,"b":[2]}`), []byte(`{"b": [2], "a": 1}`)) || revision.SameData([]byte(`{"a":1}`), []byte(`{"a":2}`)) {
		t.Error("sameData compares values")
	}
}
