package namespace

import (
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContentResources(t *testing.T) {
	all := metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Namespaced: true, Verbs: all},
			{Name: "pods/status", Namespaced: true, Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "bindings", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			{Name: "namespaces", Namespaced: false, Verbs: all},
			{Name: "events", Namespaced: true, Verbs: metav1.Verbs{"list", "delete"}},
			{Name: "readonly", Namespaced: true, Verbs: metav1.Verbs{"get", "list"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Namespaced: true, Verbs: all},
			{Name: "deployments/scale", Namespaced: true, Verbs: metav1.Verbs{"get", "update"}},
			{Name: "nolist", Namespaced: true, Verbs: metav1.Verbs{"delete", "deletecollection"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Namespaced: true, Verbs: all}}},
	}
	got := contentResources(lists)
	want := []contentResource{
		{"v1", "pods", true},
		{"v1", "events", false},
		{"apps/v1", "deployments", true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, tc := range []struct {
		r    contentResource
		want string
	}{
		{want[0], "/api/v1/namespaces/ns/pods"},
		{want[2], "/apis/apps/v1/namespaces/ns/deployments"},
	} {
		if p := tc.r.path("ns"); p != tc.want {
			t.Errorf("%v: path %q, want %q", tc.r, p, tc.want)
		}
	}
}

func TestPodGraceEstimate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	grace := func(s int64) *int64 { return &s }
	pod := func(phase corev1.PodPhase, g *int64) corev1.Pod {
		return corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: g}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		elapsed time.Duration
		want    time.Duration
	}{
		{"no pods", nil, 0, 0},
		{"default grace", []corev1.Pod{pod(corev1.PodRunning, nil)}, time.Second, 30 * time.Second},
		{"longest wins", []corev1.Pod{pod(corev1.PodRunning, grace(5)), pod(corev1.PodPending, grace(90))}, 0, 90 * time.Second},
		{"terminated ignored", []corev1.Pod{pod(corev1.PodSucceeded, grace(90)), pod(corev1.PodFailed, nil), pod(corev1.PodRunning, grace(10))}, 0, 10 * time.Second},
		{"past the grace", []corev1.Pod{pod(corev1.PodRunning, grace(10))}, 10 * time.Second, 0},
		{"zero grace", []corev1.Pod{pod(corev1.PodRunning, grace(0))}, 0, 0},
	} {
		if got := podGraceEstimate(tc.pods, t0, t0.Add(tc.elapsed)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestConditions(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	type want struct {
		typ    corev1.NamespaceConditionType
		status corev1.ConditionStatus
		reason string
		msg    string
	}
	for _, tc := range []struct {
		name string
		out  outcome
		want []want
	}{
		{"all done", outcome{}, []want{
			{corev1.NamespaceDeletionDiscoveryFailure, corev1.ConditionFalse, "ResourcesDiscovered", ""},
			{corev1.NamespaceDeletionGVParsingFailure, corev1.ConditionFalse, "ParsedGroupVersions", ""},
			{corev1.NamespaceDeletionContentFailure, corev1.ConditionFalse, "ContentDeleted", ""},
			{corev1.NamespaceContentRemaining, corev1.ConditionFalse, "ContentRemoved", ""},
			{corev1.NamespaceFinalizersRemaining, corev1.ConditionFalse, "ContentHasNoFinalizers", ""},
		}},
		{"troubles", outcome{
			discoveryErr: errors.New("boom"),
			deleteErrs:   []string{"pods.v1: denied"},
			remaining:    map[string]int{"pods.v1": 2, "configmaps.v1": 1},
			finalizers:   map[string]int{"configmaps.v1 example.com/hold": 1},
		}, []want{
			{corev1.NamespaceDeletionDiscoveryFailure, corev1.ConditionTrue, "DiscoveryFailed", "Discovery failed: boom"},
			{corev1.NamespaceDeletionGVParsingFailure, corev1.ConditionFalse, "ParsedGroupVersions", ""},
			{corev1.NamespaceDeletionContentFailure, corev1.ConditionTrue, "ContentDeletionFailed", "Failed to delete all resource types, 1 remaining: pods.v1: denied"},
			{corev1.NamespaceContentRemaining, corev1.ConditionTrue, "SomeResourcesRemain", "Some resources are remaining: configmaps.v1 has 1 instances, pods.v1 has 2 instances"},
			{corev1.NamespaceFinalizersRemaining, corev1.ConditionTrue, "SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: configmaps.v1 example.com/hold has 1 resource instances"},
		}},
	} {
		got := tc.out.conditions(now)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d conditions, want %d", tc.name, len(got), len(tc.want))
		}
		for i, w := range tc.want {
			g := got[i]
			if g.Type != w.typ || g.Status != w.status || g.Reason != w.reason || g.Message != w.msg || !g.LastTransitionTime.Equal(&now) {
				t.Errorf("%s: condition %d = %+v, want %+v", tc.name, i, g, w)
			}
		}
	}
}

func TestWithConditions(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Minute))
	c := func(typ corev1.NamespaceConditionType, s corev1.ConditionStatus, at metav1.Time) corev1.NamespaceCondition {
		return corev1.NamespaceCondition{Type: typ, Status: s, Reason: string(s), LastTransitionTime: at}
	}
	base := corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating, Conditions: []corev1.NamespaceCondition{c("A", corev1.ConditionTrue, t1)}}
	for _, tc := range []struct {
		name    string
		conds   []corev1.NamespaceCondition
		want    []corev1.NamespaceCondition
		changed bool
	}{
		{"same keeps time", []corev1.NamespaceCondition{c("A", corev1.ConditionTrue, t2)}, []corev1.NamespaceCondition{c("A", corev1.ConditionTrue, t1)}, false},
		{"flip", []corev1.NamespaceCondition{c("A", corev1.ConditionFalse, t2)}, []corev1.NamespaceCondition{c("A", corev1.ConditionFalse, t2)}, true},
		{"new", []corev1.NamespaceCondition{c("B", corev1.ConditionFalse, t2)}, []corev1.NamespaceCondition{c("A", corev1.ConditionTrue, t1), c("B", corev1.ConditionFalse, t2)}, true},
	} {
		got, changed := withConditions(base, tc.conds)
		if changed != tc.changed || got.Phase != base.Phase || len(got.Conditions) != len(tc.want) {
			t.Errorf("%s: changed %v conditions %+v", tc.name, changed, got.Conditions)
			continue
		}
		for i := range tc.want {
			if g, w := got.Conditions[i], tc.want[i]; g.Type != w.Type || g.Status != w.Status || !g.LastTransitionTime.Equal(&w.LastTransitionTime) {
				t.Errorf("%s: %+v, want %+v", tc.name, g, w)
			}
		}
	}
	if base.Conditions[0].Status != corev1.ConditionTrue {
		t.Error("withConditions modified its input")
	}
}
