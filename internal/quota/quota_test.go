package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// list parses "name=amount" pairs: list("pods=1", "requests.cpu=500m").
func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		name, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	return out
}

// ctr is a container with cpu request and limit ("" leaves one out).
func ctr(name, request, limit string) corev1.Container {
	c := corev1.Container{Name: name}
	if request != "" {
		c.Resources.Requests = list("cpu=" + request)
	}
	if limit != "" {
		c.Resources.Limits = list("cpu=" + limit)
	}
	return c
}

func newPod(change func(*corev1.Pod), containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ResourceVersion: "5"},
		Spec: corev1.PodSpec{Containers: containers}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if change != nil {
		change(p)
	}
	return p
}

func TestUsage(t *testing.T) {
	deadline := int64(30)
	claim := func(class, request, allocated string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: list("storage=" + request)}}}
		if class != "" {
			c.Spec.StorageClassName = &class
		}
		if allocated != "" {
			c.Status.AllocatedResources = list("storage=" + allocated)
		}
		return c
	}
	svc := func(typ corev1.ServiceType, allocate *bool, nodePorts ...int32) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, AllocateLoadBalancerNodePorts: allocate}}
		for _, np := range nodePorts {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{NodePort: np})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		gr   schema.GroupResource
		obj  runtime.Object
		want corev1.ResourceList
	}{
		{"pod requests and limits add up", podsResource, newPod(nil, ctr("a", "100m", "1"), ctr("b", "200m", "")),
			list("count/pods=1", "pods=1", "cpu=300m", "requests.cpu=300m", "limits.cpu=1")},
		{"init container larger than the containers", podsResource, newPod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{ctr("init", "2", "2")}
		}, ctr("a", "500m", "1")), list("count/pods=1", "pods=1", "cpu=2", "requests.cpu=2", "limits.cpu=2")},
		{"best-effort pod", podsResource, newPod(nil, ctr("a", "", "")), list("count/pods=1", "pods=1")},
		{"finished pod counts as an object only", podsResource, newPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, ctr("a", "1", "1")),
			list("count/pods=1")},
		{"pod within its grace period", podsResource, newPod(func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: t0.Add(-10 * time.Second)}, &deadline
		}, ctr("a", "1", "")), list("count/pods=1", "pods=1", "cpu=1", "requests.cpu=1")},
		{"pod past its grace period", podsResource, newPod(func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: t0.Add(-time.Minute)}, &deadline
		}, ctr("a", "1", "")), list("count/pods=1")},
		{"hugepages, memory and extended resources", podsResource, newPod(nil, corev1.Container{Name: "a", Resources: corev1.ResourceRequirements{
			Requests: list("memory=1Gi", "hugepages-2Mi=4Mi", "example.com/gpu=2"), Limits: list("memory=2Gi", "hugepages-2Mi=4Mi", "example.com/gpu=2")}}),
			list("count/pods=1", "pods=1", "memory=1Gi", "requests.memory=1Gi", "limits.memory=2Gi", "hugepages-2Mi=4Mi",
				"requests.hugepages-2Mi=4Mi", "requests.example.com/gpu=2")},
		{"pod-level resources", podsResource, newPod(func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Requests: list("cpu=4"), Limits: list("cpu=8")}
		}, ctr("a", "1", "")), list("count/pods=1", "pods=1", "cpu=4", "requests.cpu=4", "limits.cpu=8")},
		{"cluster IP service", svcResource, svc(corev1.ServiceTypeClusterIP, nil, 0, 0),
			list("count/services=1", "services=1", "services.nodeports=0", "services.loadbalancers=0")},
		{"node port service: a port each", svcResource, svc(corev1.ServiceTypeNodePort, nil, 0, 0),
			list("count/services=1", "services=1", "services.nodeports=2", "services.loadbalancers=0")},
		{"load balancer", svcResource, svc(corev1.ServiceTypeLoadBalancer, nil, 0, 0, 0),
			list("count/services=1", "services=1", "services.nodeports=3", "services.loadbalancers=1")},
		{"load balancer without node ports: only the ports asked for", svcResource, svc(corev1.ServiceTypeLoadBalancer, new(false), 30001, 0),
			list("count/services=1", "services=1", "services.nodeports=1", "services.loadbalancers=1")},
		{"claim: storage by class, in whole bytes", claimsResource, claim("gold", "1500m", ""),
			list("count/persistentvolumeclaims=1", "persistentvolumeclaims=1", "requests.storage=2",
				"gold.storageclass.storage.k8s.io/persistentvolumeclaims=1", "gold.storageclass.storage.k8s.io/requests.storage=2")},
		{"claim: more storage allocated than requested", claimsResource, claim("", "1Gi", "2Gi"),
			list("count/persistentvolumeclaims=1", "persistentvolumeclaims=1", "requests.storage=2Gi")},
		{"configmap: counted under both names", schema.GroupResource{Resource: "configmaps"}, &corev1.ConfigMap{},
			list("count/configmaps=1", "configmaps=1")},
		{"deployment: counted with its group", schema.GroupResource{Group: "apps", Resource: "deployments"}, &appsv1.Deployment{},
			list("count/deployments.apps=1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := For(tc.gr).Usage(tc.obj, t0)
			if err != nil {
				t.Fatal(err)
			}
			if !Equal(got, tc.want) {
				t.Errorf("usage %s, want %s", Format(got), Format(tc.want))
			}
		})
	}
}

func TestMatching(t *testing.T) {
	names := []corev1.ResourceName{"pods", "count/pods", "requests.cpu", "limits.memory", "services", "requests.storage",
		"gold.storageclass.storage.k8s.io/requests.storage", "requests.example.com/gpu", "hugepages-2Mi", "count/deployments.apps", "secrets"}
	for _, tc := range []struct {
		gr   schema.GroupResource
		want string
	}{
		{podsResource, "count/pods,hugepages-2Mi,limits.memory,pods,requests.cpu,requests.example.com/gpu"},
		{svcResource, "services"},
		{claimsResource, "gold.storageclass.storage.k8s.io/requests.storage,requests.storage"},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "count/deployments.apps"},
		{schema.GroupResource{Resource: "secrets"}, "secrets"},
	} {
		if got := FormatNames(For(tc.gr).Matching(names)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.gr, got, tc.want)
		}
	}
}

func TestScopes(t *testing.T) {
	guaranteed := newPod(nil, ctr("a", "1", "1"))
	bestEffort := newPod(nil, ctr("a", "", ""))
	terminating := newPod(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(60)) }, ctr("a", "", ""))
	high := newPod(func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }, ctr("a", "", ""))
	cross := newPod(func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{TopologyKey: "zone", Namespaces: []string{"other"}}}}}
	}, ctr("a", "", ""))
	exists := func(s corev1.ResourceQuotaScope) corev1.ScopedResourceSelectorRequirement {
		return corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists}
	}
	in := func(op corev1.ScopeSelectorOperator, values ...string) corev1.ScopedResourceSelectorRequirement {
		return corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: op, Values: values}
	}
	for _, tc := range []struct {
		name string
		sel  corev1.ScopedResourceSelectorRequirement
		pod  *corev1.Pod
		want bool
	}{
		{"BestEffort: no requests", exists(corev1.ResourceQuotaScopeBestEffort), bestEffort, true},
		{"BestEffort: with requests", exists(corev1.ResourceQuotaScopeBestEffort), guaranteed, false},
		{"NotBestEffort", exists(corev1.ResourceQuotaScopeNotBestEffort), guaranteed, true},
		{"Terminating: a deadline", exists(corev1.ResourceQuotaScopeTerminating), terminating, true},
		{"Terminating: none", exists(corev1.ResourceQuotaScopeTerminating), bestEffort, false},
		{"NotTerminating", exists(corev1.ResourceQuotaScopeNotTerminating), bestEffort, true},
		{"PriorityClass exists", exists(corev1.ResourceQuotaScopePriorityClass), high, true},
		{"PriorityClass exists, none", exists(corev1.ResourceQuotaScopePriorityClass), bestEffort, false},
		{"PriorityClass In", in(corev1.ScopeSelectorOpIn, "high", "mid"), high, true},
		{"PriorityClass In, other", in(corev1.ScopeSelectorOpIn, "low"), high, false},
		{"PriorityClass NotIn, none", in(corev1.ScopeSelectorOpNotIn, "low"), bestEffort, true},
		{"PriorityClass DoesNotExist", in(corev1.ScopeSelectorOpDoesNotExist), bestEffort, true},
		{"CrossNamespacePodAffinity", exists(corev1.ResourceQuotaScopeCrossNamespacePodAffinity), cross, true},
		{"CrossNamespacePodAffinity, none", exists(corev1.ResourceQuotaScopeCrossNamespacePodAffinity), bestEffort, false},
	} {
		got, err := For(podsResource).MatchesScope(tc.sel, tc.pod)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if ok, _ := For(schema.GroupResource{Resource: "configmaps"}).MatchesScope(exists(corev1.ResourceQuotaScopeNotTerminating), &corev1.ConfigMap{}); ok {
		t.Error("a configmap falls in a pod scope")
	}
	vac := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeAttributesClassName: new("fast")}}
	sel := corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeVolumeAttributesClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"fast"}}
	if ok, err := For(claimsResource).MatchesScope(sel, vac); !ok || err != nil {
		t.Errorf("VolumeAttributesClass In fast: %v %v", ok, err)
	}
}

// rq is a quota whose status enforces hard and counts used (pairs as for list); nil used
// leaves status.used empty.
func rq(name string, hard, used []string, scopes ...corev1.ResourceQuotaScope) corev1.ResourceQuota {
	q := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7"},
		Spec: corev1.ResourceQuotaSpec{Hard: list(hard...), Scopes: scopes}}
	q.Status.Hard = list(hard...)
	if used != nil {
		q.Status.Used = list(used...)
	}
	return q
}

func TestCheck(t *testing.T) {
	create := func(gr schema.GroupResource, obj runtime.Object) Request {
		return Request{Resource: gr, Operation: Create, Object: obj, Now: t0}
	}
	update := func(gr schema.GroupResource, obj, old runtime.Object, sub string) Request {
		return Request{Resource: gr, Operation: Update, Object: obj, Old: old, Subresource: sub, Now: t0}
	}
	pod := newPod(nil, ctr("main", "500m", "1"))
	noRequests := newPod(nil, ctr("main", "", ""), ctr("side", "", "1"))
	withDeadline := newPod(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(60)) }, ctr("main", "500m", "1"))
	nodePort := &corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "3"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}, {Port: 81}}}}
	clusterIP := &corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "3"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: nodePort.Spec.Ports}}
	claim := func(allocated string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4"}, Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: list("storage=1Gi")}}}
		c.Status.AllocatedResources = list("storage=" + allocated)
		return c
	}
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		name   string
		quotas []corev1.ResourceQuota
		req    Request
		// used is each quota's status.used after the charge; refused the refusal's message.
		used    [][]string
		refused string
	}{
		{"no quota", nil, create(podsResource, pod), nil, ""},
		{"fits", []corev1.ResourceQuota{rq("q", []string{"pods=2", "requests.cpu=1"}, []string{"pods=1", "requests.cpu=200m"})},
			create(podsResource, pod), [][]string{{"pods=2", "requests.cpu=700m"}}, ""},
		{"last pod", []corev1.ResourceQuota{rq("q", []string{"pods=1"}, []string{"pods=1"})},
			create(podsResource, pod), nil, "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"},
		{"cpu over, pods fine: only cpu named", []corev1.ResourceQuota{rq("compute", []string{"pods=10", "requests.cpu=1", "limits.cpu=4"}, []string{"pods=1", "requests.cpu=800m", "limits.cpu=1"})},
			create(podsResource, pod), nil, "exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=800m, limited: requests.cpu=1"},
		{"two quotas, the second full", []corev1.ResourceQuota{rq("a", []string{"pods=5"}, []string{"pods=0"}), rq("b", []string{"cpu=1"}, []string{"cpu=600m"})},
			create(podsResource, pod), nil, "exceeded quota: b, requested: cpu=500m, used: cpu=600m, limited: cpu=1"},
		{"two quotas, both charged", []corev1.ResourceQuota{rq("a", []string{"pods=5"}, []string{"pods=0"}), rq("b", []string{"count/pods=3"}, []string{"count/pods=1"})},
			create(podsResource, pod), [][]string{{"pods=1"}, {"count/pods=2"}}, ""},
		{"containers must say what is limited", []corev1.ResourceQuota{rq("q", []string{"requests.cpu=1", "limits.cpu=2"}, []string{"requests.cpu=0", "limits.cpu=0"})},
			create(podsResource, noRequests), nil, "failed quota: q: must specify limits.cpu for: main; requests.cpu for: main,side"},
		{"a quota of pods only asks nothing of containers", []corev1.ResourceQuota{rq("q", []string{"pods=1"}, []string{"pods=0"})},
			create(podsResource, noRequests), [][]string{{"pods=1"}}, ""},
		{"status not counted yet", []corev1.ResourceQuota{rq("q", []string{"pods=1"}, nil)},
			create(podsResource, pod), nil, "status unknown for quota: q, resources: pods"},
		{"a new quota without status enforces nothing yet", []corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: list("pods=0")}}},
			create(podsResource, pod), nil, ""},
		{"best-effort quota leaves a pod with requests alone", []corev1.ResourceQuota{rq("be", []string{"pods=0"}, []string{"pods=0"}, corev1.ResourceQuotaScopeBestEffort)},
			create(podsResource, pod), nil, ""},
		{"not-terminating quota leaves a pod with a deadline alone", []corev1.ResourceQuota{rq("long", []string{"pods=0"}, []string{"pods=0"}, corev1.ResourceQuotaScopeNotTerminating)},
			create(podsResource, withDeadline), nil, ""},
		{"deployments counted with their group", []corev1.ResourceQuota{rq("q", []string{"count/deployments.apps=1"}, []string{"count/deployments.apps=1"})},
			create(deployments, &appsv1.Deployment{}), nil, "exceeded quota: q, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1"},
		{"object counts charge creates only", []corev1.ResourceQuota{rq("q", []string{"count/deployments.apps=1"}, []string{"count/deployments.apps=1"})},
			update(deployments, &appsv1.Deployment{}, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}}, ""), nil, ""},
		{"a scoped quota counts no configmaps", []corev1.ResourceQuota{rq("q", []string{"configmaps=0"}, []string{"configmaps=0"}, corev1.ResourceQuotaScopeNotTerminating)},
			create(schema.GroupResource{Resource: "configmaps"}, &corev1.ConfigMap{}), nil, ""},
		{"events are never counted", []corev1.ResourceQuota{rq("q", []string{"count/events=0"}, []string{"count/events=0"})},
			create(schema.GroupResource{Resource: "events"}, &corev1.Event{}), nil, ""},
		{"a deadline moves the pod into the terminating quota", []corev1.ResourceQuota{
			rq("long", []string{"pods=5"}, []string{"pods=1"}, corev1.ResourceQuotaScopeNotTerminating),
			rq("short", []string{"pods=5", "requests.cpu=1"}, []string{"pods=0", "requests.cpu=0"}, corev1.ResourceQuotaScopeTerminating)},
			update(podsResource, withDeadline, pod, ""), [][]string{{"pods=1"}, {"pods=1", "requests.cpu=500m"}}, ""},
		{"a pod update that changes no scope is not judged", []corev1.ResourceQuota{rq("q", []string{"pods=0"}, []string{"pods=0"})},
			update(podsResource, pod, pod, ""), nil, ""},
		{"service becomes a NodePort: its ports are charged", []corev1.ResourceQuota{rq("q", []string{"services.nodeports=1", "services=5"}, []string{"services.nodeports=0", "services=1"})},
			update(svcResource, nodePort, clusterIP, ""), nil, "exceeded quota: q, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"},
		{"service stops being a NodePort: nothing charged", []corev1.ResourceQuota{rq("q", []string{"services.nodeports=1"}, []string{"services.nodeports=2"})},
			update(svcResource, clusterIP, nodePort, ""), nil, ""},
		{"allocated storage grows past the quota: charged, not refused", []corev1.ResourceQuota{rq("q", []string{"requests.storage=2Gi"}, []string{"requests.storage=2Gi"})},
			update(claimsResource, claim("3Gi"), claim("2Gi"), "status"), [][]string{{"requests.storage=3Gi"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]corev1.ResourceQuota, len(tc.quotas))
			for i := range tc.quotas {
				tc.quotas[i].DeepCopyInto(&before[i])
			}
			out, err := Check(tc.quotas, tc.req)
			var refusal *Refusal
			switch {
			case tc.refused != "":
				if !errors.As(err, &refusal) || refusal.Message != tc.refused {
					t.Fatalf("got %v, want refusal %q", err, tc.refused)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			for i := range tc.quotas {
				want := tc.quotas[i].Status.Used
				if tc.used != nil {
					want = list(tc.used[i]...)
				}
				if !Equal(out[i].Status.Used, want) {
					t.Errorf("quota %s used %s, want %s", out[i].Name, Format(out[i].Status.Used), Format(want))
				}
				if !Equal(tc.quotas[i].Status.Used, before[i].Status.Used) {
					t.Errorf("Check changed its input quota %s", tc.quotas[i].Name)
				}
			}
		})
	}
}

func TestCalculate(t *testing.T) {
	pods := []runtime.Object{
		newPod(nil, ctr("a", "500m", "1")),
		newPod(nil, ctr("a", "250m", "")),
		newPod(nil, ctr("a", "", "")), // best effort
		newPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, ctr("a", "2", "2")),
	}
	listers := map[schema.GroupResource]Lister{
		podsResource: func(string) ([]runtime.Object, error) { return pods, nil },
		{Resource: "configmaps"}: func(string) ([]runtime.Object, error) {
			return []runtime.Object{&corev1.ConfigMap{}, &corev1.ConfigMap{}}, nil
		},
		{Resource: "secrets"}: func(string) ([]runtime.Object, error) { return nil, errors.New("boom") },
	}
	for _, tc := range []struct {
		name   string
		hard   []string
		scopes []corev1.ResourceQuotaScope
		want   []string
		err    bool
	}{
		{"unscoped", []string{"pods=10", "count/pods=10", "requests.cpu=4", "limits.cpu=4", "configmaps=5", "count/configmaps=5"}, nil,
			[]string{"pods=3", "count/pods=4", "requests.cpu=750m", "limits.cpu=1", "configmaps=2", "count/configmaps=2"}, false},
		{"not best effort", []string{"pods=10", "requests.cpu=4"}, []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort},
			[]string{"pods=2", "requests.cpu=750m"}, false},
		{"nothing counted is zero", []string{"requests.memory=1Gi"}, nil, []string{"requests.memory=0"}, false},
		{"unknown resources are left out", []string{"count/widgets.example.com=1", "pods=1"}, nil, []string{"pods=3"}, false},
		{"a failed list leaves its names out", []string{"secrets=1", "pods=5"}, nil, []string{"pods=3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := corev1.ResourceQuotaSpec{Hard: list(tc.hard...), Scopes: tc.scopes}
			got, err := Calculate("ns", &spec, spec.Hard, listers, t0)
			if (err != nil) != tc.err {
				t.Errorf("error %v, want one: %v", err, tc.err)
			}
			if want := list(tc.want...); !Equal(got, want) {
				t.Errorf("used %s, want %s", Format(got), Format(want))
			}
		})
	}
}

func TestArithmetic(t *testing.T) {
	if got := Format(SubtractNonNegative(list("a=1", "b=500m"), list("a=2", "c=1"))); got != "a=0,b=500m,c=0" {
		t.Errorf("SubtractNonNegative: %s", got)
	}
	if got := Exceeded(list("a=2", "b=1"), list("a=1", "b=1", "c=0")); len(got) != 1 || got[0] != "a" {
		t.Errorf("Exceeded: %v", got)
	}
	if got := Format(Add(list("cpu=0"), list("cpu=500m", "pods=1"))); got != "cpu=500m,pods=1" {
		t.Errorf("Add: %s", got)
	}
	if !Equal(list("cpu=1"), list("cpu=1000m")) || Equal(list("cpu=1"), list("cpu=1", "pods=0")) {
		t.Error("Equal")
	}
}
