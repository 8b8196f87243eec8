package registry

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kplane/kplane/internal/limitrange"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// rl parses "name=amount" pairs into a resource list.
func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		name, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	return out
}

func newQuota(hard []string, change func(*corev1.ResourceQuota)) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{ObjectMeta: meta("q"), Spec: corev1.ResourceQuotaSpec{Hard: rl(hard...)}}
	if change != nil {
		change(q)
	}
	return q
}

func scopes(s ...corev1.ResourceQuotaScope) func(*corev1.ResourceQuota) {
	return func(q *corev1.ResourceQuota) { q.Spec.Scopes = s }
}

func selector(reqs ...corev1.ScopedResourceSelectorRequirement) func(*corev1.ResourceQuota) {
	return func(q *corev1.ResourceQuota) { q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: reqs} }
}

func TestValidateResourceQuota(t *testing.T) {
	pc := corev1.ResourceQuotaScopePriorityClass
	for _, tc := range []struct {
		name string
		q    *corev1.ResourceQuota
		want []string
	}{
		{"ok", newQuota([]string{"pods=2", "requests.cpu=1", "limits.memory=2Gi", "count/deployments.apps=3", "services.loadbalancers=1",
			"gold.storageclass.storage.k8s.io/requests.storage=10Gi", "requests.example.com/gpu=4", "hugepages-2Mi=1Gi"}, nil), nil},
		{"unknown plain name", newQuota([]string{"widgets=1"}, nil), []string{"FieldValueInvalid spec.hard[widgets]", "FieldValueInvalid spec.hard[widgets]"}},
		{"a resource quota cannot limit", newQuota([]string{"storage=1Gi"}, nil), []string{"FieldValueInvalid spec.hard[storage]"}},
		{"not a qualified name", newQuota([]string{"a b/c=1"}, nil), []string{"FieldValueInvalid spec.hard[a b/c]"}},
		{"negative", newQuota([]string{"requests.cpu=-1"}, nil), []string{"FieldValueInvalid spec.hard[requests.cpu]"}},
		{"a count in parts", newQuota([]string{"pods=1500m", "count/secrets=500m"}, nil),
			[]string{"FieldValueInvalid spec.hard[count/secrets]", "FieldValueInvalid spec.hard[pods]"}},
		{"scope for pods", newQuota([]string{"pods=2", "requests.cpu=1"}, scopes(corev1.ResourceQuotaScopeNotBestEffort, corev1.ResourceQuotaScopeTerminating)), nil},
		{"best effort pods have no cpu", newQuota([]string{"pods=2", "requests.cpu=1"}, scopes(corev1.ResourceQuotaScopeBestEffort)),
			[]string{"FieldValueInvalid spec.scopes"}},
		{"pod scope on services", newQuota([]string{"services=1"}, scopes(corev1.ResourceQuotaScopeNotTerminating)),
			[]string{"FieldValueInvalid spec.scopes"}},
		{"unknown scope", newQuota([]string{"pods=1"}, scopes("Sometimes")), []string{"FieldValueInvalid spec.scopes"}},
		{"conflicting scopes", newQuota([]string{"pods=1"}, scopes(corev1.ResourceQuotaScopeBestEffort, corev1.ResourceQuotaScopeNotBestEffort,
			corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating)), []string{"FieldValueInvalid spec.scopes", "FieldValueInvalid spec.scopes"}},
		{"selector ok", newQuota([]string{"pods=1"}, selector(corev1.ScopedResourceSelectorRequirement{ScopeName: pc, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}})), nil},
		{"In without values", newQuota([]string{"pods=1"}, selector(corev1.ScopedResourceSelectorRequirement{ScopeName: pc, Operator: corev1.ScopeSelectorOpIn})),
			[]string{"FieldValueRequired spec.scopeSelector.matchExpressions.values"}},
		{"Exists with values", newQuota([]string{"pods=1"}, selector(corev1.ScopedResourceSelectorRequirement{ScopeName: pc, Operator: corev1.ScopeSelectorOpExists, Values: []string{"x"}})),
			[]string{"FieldValueInvalid spec.scopeSelector.matchExpressions.values"}},
		{"Terminating only with Exists", newQuota([]string{"pods=1"}, selector(corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeTerminating, Operator: corev1.ScopeSelectorOpIn, Values: []string{"x"}})),
			[]string{"FieldValueInvalid spec.scopeSelector.matchExpressions.operator"}},
		{"unknown operator and scope", newQuota([]string{"pods=1"}, selector(corev1.ScopedResourceSelectorRequirement{ScopeName: "Sometimes", Operator: "Maybe"})),
			[]string{"FieldValueInvalid spec.scopeSelector.matchExpressions.operator", "FieldValueInvalid spec.scopeSelector.matchExpressions.scopeName"}},
		{"selector conflict", newQuota([]string{"pods=1"}, selector(
			corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeBestEffort, Operator: corev1.ScopeSelectorOpExists},
			corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeNotBestEffort, Operator: corev1.ScopeSelectorOpExists})),
			[]string{"FieldValueInvalid spec.scopeSelector.matchExpressions"}},
		{"VolumeAttributesClass on claims", newQuota([]string{"requests.storage=1Gi", "pods=1"}, scopes(corev1.ResourceQuotaScopeVolumeAttributesClass)),
			[]string{"FieldValueInvalid spec.scopes"}},
		{"status checked too", newQuota([]string{"pods=1"}, func(q *corev1.ResourceQuota) { q.Status.Used = rl("pods=-1", "widgets=0") }),
			[]string{"FieldValueInvalid status.used[pods]", "FieldValueInvalid status.used[widgets]", "FieldValueInvalid status.used[widgets]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errs(resourceQuotas.ValidateObject(tc.q, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %q, want %q", got, tc.want)
			}
		})
	}
	// Kubernetes' words, which kubectl shows.
	e := resourceQuotas.ValidateObject(newQuota([]string{"pods=1500m", "widgets=1"}, nil), nil).ToAggregate().Error()
	for _, want := range []string{`spec.hard[pods]: Invalid value: "1500m": must be an integer`,
		`spec.hard[widgets]: Invalid value: "widgets": must be a standard resource for quota`,
		`spec.hard[widgets]: Invalid value: "widgets": must be a standard resource type or fully qualified`} {
		if !strings.Contains(e, want) {
			t.Errorf("%q lacks %q", e, want)
		}
	}
}

func TestResourceQuotaUpdate(t *testing.T) {
	old := newQuota([]string{"pods=2"}, scopes(corev1.ResourceQuotaScopeNotTerminating))
	old.ResourceVersion = "1"
	resourceQuotas.PrepareCreate(old)
	old.Status = corev1.ResourceQuotaStatus{Hard: rl("pods=2"), Used: rl("pods=1")}

	// A spec write keeps the status the controller and admission keep.
	q := old.DeepCopy()
	q.Spec.Hard = rl("pods=5")
	q.Status.Used = rl("pods=0")
	resourceQuotas.PrepareUpdate(q, old, "")
	if q.Status.Used.Pods().String() != "1" || q.Generation != 2 {
		t.Errorf("spec write: used %v generation %d", q.Status.Used, q.Generation)
	}
	// A status write keeps the spec.
	q = old.DeepCopy()
	q.Spec.Hard = rl("pods=5")
	q.Status.Used = rl("pods=2")
	resourceQuotas.PrepareUpdate(q, old, "status")
	if q.Spec.Hard.Pods().String() != "2" || q.Status.Used.Pods().String() != "2" {
		t.Errorf("status write: %v %v", q.Spec.Hard, q.Status.Used)
	}
	// Scopes are fixed once the quota exists.
	q = old.DeepCopy()
	q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}
	resourceQuotas.PrepareUpdate(q, old, "")
	if got := errs(resourceQuotas.ValidateObject(q, old)); !slices.Equal(got, []string{"FieldValueInvalid spec.scopes"}) {
		t.Errorf("scope change: %q", got)
	}
	// A new quota's status is the controller's to write.
	fresh := newQuota([]string{"pods=1"}, func(q *corev1.ResourceQuota) { q.Status.Used = rl("pods=0") })
	resourceQuotas.PrepareCreate(fresh)
	if fresh.Status.Used != nil || fresh.Status.Hard != nil {
		t.Errorf("status kept on create: %+v", fresh.Status)
	}
}

func TestQuotaRow(t *testing.T) {
	q := newQuota(nil, func(q *corev1.ResourceQuota) {
		q.Status = corev1.ResourceQuotaStatus{
			Hard: rl("pods=2", "requests.cpu=1", "limits.cpu=2", "limits.memory=1Gi", "count/deployments.apps=3"),
			Used: rl("pods=1", "requests.cpu=500m", "limits.cpu=1"),
		}
	})
	if got := resourceQuotas.TableRow(q); got[1] != "count/deployments.apps: 0/3, pods: 1/2, requests.cpu: 500m/1" ||
		got[2] != "limits.cpu: 1/2, limits.memory: 0/1Gi" {
		t.Errorf("row %q", got)
	}
	var names []string
	for _, c := range resourceQuotas.TableColumns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Request", "Limit", "Age"}; !slices.Equal(names, want) {
		t.Errorf("columns %q, want %q (v1.36's printer)", names, want)
	}
	names = nil
	for _, c := range limitRanges.TableColumns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Created At"}; !slices.Equal(names, want) {
		t.Errorf("limitrange columns %q, want %q", names, want)
	}
}

func newLimitRange(items ...corev1.LimitRangeItem) *corev1.LimitRange {
	return &corev1.LimitRange{ObjectMeta: meta("lr"), Spec: corev1.LimitRangeSpec{Limits: items}}
}

func TestValidateLimitRange(t *testing.T) {
	item := func(typ corev1.LimitType, change func(*corev1.LimitRangeItem)) corev1.LimitRangeItem {
		i := corev1.LimitRangeItem{Type: typ}
		change(&i)
		return i
	}
	for _, tc := range []struct {
		name string
		lr   *corev1.LimitRange
		want []string
	}{
		{"ok", newLimitRange(
			item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) {
				i.Min, i.Max, i.Default, i.DefaultRequest = rl("cpu=100m"), rl("cpu=2"), rl("cpu=1"), rl("cpu=500m")
				i.MaxLimitRequestRatio = rl("cpu=4")
			}),
			item(corev1.LimitTypePod, func(i *corev1.LimitRangeItem) { i.Max = rl("memory=4Gi") }),
			item(corev1.LimitTypePersistentVolumeClaim, func(i *corev1.LimitRangeItem) { i.Max = rl("storage=10Gi") })), nil},
		{"type twice, unknown type", newLimitRange(
			item(corev1.LimitTypePod, func(i *corev1.LimitRangeItem) {}), item(corev1.LimitTypePod, func(i *corev1.LimitRangeItem) {}),
			item("Node", func(i *corev1.LimitRangeItem) {})),
			[]string{"FieldValueDuplicate spec.limits[1].type", "FieldValueInvalid spec.limits[2].type"}},
		{"no defaults for pods", newLimitRange(item(corev1.LimitTypePod, func(i *corev1.LimitRangeItem) { i.Default, i.DefaultRequest = rl("cpu=1"), rl("cpu=1") })),
			[]string{"FieldValueForbidden spec.limits[0].default", "FieldValueForbidden spec.limits[0].defaultRequest"}},
		{"a claim bound needs storage", newLimitRange(item(corev1.LimitTypePersistentVolumeClaim, func(i *corev1.LimitRangeItem) { i.Max = rl("cpu=1") })),
			[]string{"FieldValueRequired spec.limits[0].limits"}},
		{"containers bound compute resources", newLimitRange(item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) { i.Max = rl("storage=1Gi") })),
			[]string{"FieldValueInvalid spec.limits[0].defaultRequest[storage]", "FieldValueInvalid spec.limits[0].default[storage]", "FieldValueInvalid spec.limits[0].max[storage]"}},
		{"min over max", newLimitRange(item(corev1.LimitTypePod, func(i *corev1.LimitRangeItem) { i.Min, i.Max = rl("cpu=2"), rl("cpu=1") })),
			[]string{"FieldValueInvalid spec.limits[0].min[cpu]"}},
		{"default over max", newLimitRange(item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) {
			i.Max, i.Default, i.DefaultRequest = rl("cpu=1"), rl("cpu=2"), rl("cpu=500m")
		})), []string{"FieldValueInvalid spec.limits[0].default[cpu]"}},
		{"default request over the default", newLimitRange(item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) {
			i.Default, i.DefaultRequest = rl("cpu=1"), rl("cpu=2")
		})), []string{"FieldValueInvalid spec.limits[0].defaultRequest[cpu]"}},
		{"ratio under 1, ratio over max/min", newLimitRange(
			item(corev1.LimitTypePod, func(i *corev1.LimitRangeItem) { i.MaxLimitRequestRatio = rl("cpu=500m") }),
			item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) {
				i.Min, i.Max, i.MaxLimitRequestRatio = rl("memory=1Gi"), rl("memory=2Gi"), rl("memory=3")
			})), []string{"FieldValueInvalid spec.limits[0].maxLimitRequestRatio[cpu]", "FieldValueInvalid spec.limits[1].maxLimitRequestRatio[memory]"}},
		{"hugepages are not overcommitted", newLimitRange(item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) {
			i.Default, i.DefaultRequest = rl("hugepages-2Mi=4Mi"), rl("hugepages-2Mi=2Mi")
		})), []string{"FieldValueInvalid spec.limits[0].defaultRequest[hugepages-2Mi]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limitRanges.PrepareCreate(tc.lr)
			if got := errs(limitRanges.ValidateObject(tc.lr, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors %q, want %q", got, tc.want)
			}
		})
	}
	e := limitRanges.ValidateObject(newLimitRange(item(corev1.LimitTypeContainer, func(i *corev1.LimitRangeItem) {
		i.Max, i.Default, i.DefaultRequest = rl("cpu=1"), rl("cpu=2"), rl("cpu=500m")
	})), nil).ToAggregate().Error()
	if want := `spec.limits[0].default[cpu]: Invalid value: "1": default value 2 is greater than max value 1`; !strings.Contains(e, want) {
		t.Errorf("%q lacks %q", e, want)
	}
}

func TestLimitRangeCreate(t *testing.T) {
	lr := newLimitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: rl("cpu=1")})
	lr.Name = ""
	limitRanges.PrepareCreate(lr)
	if lr.Name == "" || len(limitRanges.ValidateObject(lr, nil)) > 0 {
		t.Errorf("a LimitRange without a name is named: %q", lr.Name)
	}
	if d := lr.Spec.Limits[0]; d.Default.Cpu().String() != "1" || d.DefaultRequest.Cpu().String() != "1" {
		t.Errorf("defaults %v %v: both from the max", d.Default, d.DefaultRequest)
	}
}

// storedObjects serves admission from fixed objects of any resource.
type storedObjects map[schema.GroupResource][]Object

func (s storedObjects) List(_ context.Context, gr schema.GroupResource) ([]Object, error) {
	return s[gr], nil
}

func (s storedObjects) Get(_ context.Context, gr schema.GroupResource, ns, name string) (Object, error) {
	for _, o := range s[gr] {
		if o.GetNamespace() == ns && o.GetName() == name {
			return o, nil
		}
	}
	return nil, apierrors.NewNotFound(gr, name)
}

func TestLimitRangeAdmission(t *testing.T) {
	ranges := newLimitRange(
		corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: rl("cpu=500m"), Default: rl("cpu=200m", "memory=64Mi"), DefaultRequest: rl("cpu=100m", "memory=64Mi")},
		corev1.LimitRangeItem{Type: corev1.LimitTypePersistentVolumeClaim, Max: rl("storage=1Gi")})
	limitRanges.PrepareCreate(ranges)
	elsewhere := newLimitRange(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Default: rl("cpu=9")})
	elsewhere.Namespace = "other"
	limitRanges.PrepareCreate(elsewhere)
	objs := storedObjects{limitRangesResource: {ranges, elsewhere}}
	ctx := context.Background()

	// Defaults fill what containers leave out, and the QoS class follows.
	p := newPod(corev1.Container{Name: "main", Image: "x"})
	pods.PrepareCreate(p)
	if p.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("before admission: %s", p.Status.QOSClass)
	}
	if err := pods.AdmitFor(ctx, objs, p, nil, ""); err != nil {
		t.Fatal(err)
	}
	main := p.Spec.Containers[0].Resources
	if main.Requests.Cpu().String() != "100m" || main.Limits.Cpu().String() != "200m" || main.Limits.Memory().String() != "64Mi" {
		t.Errorf("defaults: %v", main)
	}
	// A limit alone is already its request (the pod's own defaults come first).
	capped := newPod(corev1.Container{Name: "capped", Image: "x", Resources: corev1.ResourceRequirements{Limits: rl("cpu=300m")}})
	pods.PrepareCreate(capped)
	if err := pods.AdmitFor(ctx, objs, capped, nil, ""); err != nil {
		t.Fatal(err)
	}
	if r := capped.Spec.Containers[0].Resources; r.Requests.Cpu().String() != "300m" || r.Limits.Cpu().String() != "300m" || r.Requests.Memory().String() != "64Mi" {
		t.Errorf("defaults of a container with a limit: %v", r)
	}
	if p.Status.QOSClass != corev1.PodQOSBurstable || !strings.HasPrefix(p.Annotations[limitrange.Annotation], "LimitRanger plugin set: ") {
		t.Errorf("QoS %s, annotation %q", p.Status.QOSClass, p.Annotations[limitrange.Annotation])
	}
	if err := CheckLimitRanges(ctx, objs, p, nil); err != nil {
		t.Errorf("a defaulted pod is refused: %v", err)
	}

	// Over the max: 403 with Kubernetes' words.
	big := newPod(corev1.Container{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: rl("cpu=1")}})
	pods.PrepareCreate(big)
	err := CheckLimitRanges(ctx, objs, big, nil)
	if !apierrors.IsForbidden(err) || err.Error() != `pods "p" is forbidden: maximum cpu usage per Container is 500m, but limit is 1` {
		t.Errorf("over the max: %v", err)
	}
	// Pods are judged on create only.
	if err := CheckLimitRanges(ctx, objs, big, big); err != nil {
		t.Errorf("pod update judged: %v", err)
	}

	// Claims on create and update, unless being deleted.
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: meta("data"), Spec: corev1.PersistentVolumeClaimSpec{
		Resources: corev1.VolumeResourceRequirements{Requests: rl("storage=2Gi")}}}
	err = CheckLimitRanges(ctx, objs, claim, nil)
	if !apierrors.IsForbidden(err) || err.Error() != `persistentvolumeclaims "data" is forbidden: maximum storage usage per PersistentVolumeClaim is 1Gi, but request is 2Gi` {
		t.Errorf("claim over the max: %v", err)
	}
	if err := CheckLimitRanges(ctx, objs, claim, claim); !apierrors.IsForbidden(err) {
		t.Errorf("claim grown over the max: %v", err)
	}
	deleting := claim.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	if err := CheckLimitRanges(ctx, objs, claim, deleting); err != nil {
		t.Errorf("claim being deleted judged: %v", err)
	}
	// Another namespace's ranges do not apply.
	other := newPod(corev1.Container{Name: "main", Image: "x", Resources: corev1.ResourceRequirements{Limits: rl("cpu=1")}})
	other.Namespace = "third"
	if err := pods.AdmitFor(ctx, objs, other, nil, ""); err != nil || CheckLimitRanges(ctx, objs, other, nil) != nil || other.Annotations != nil {
		t.Errorf("ranges of other namespaces applied: %v %v", err, other.Annotations)
	}
}
