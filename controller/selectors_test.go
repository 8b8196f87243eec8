package controller

import (
	"slices"
	"testing"

	"github.com/kplane/kplane/cache"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func svc(ns, name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Selector: selector}}
}

func pod(ns, name string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}}
}

func names[T interface{ GetName() string }](objs []T) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	slices.Sort(out)
	return out
}

var (
	selectorServices = []*corev1.Service{
		svc("a", "web", map[string]string{"app": "web"}),
		svc("a", "web-prod", map[string]string{"app": "web", "env": "prod"}),
		svc("a", "all", map[string]string{}),
		svc("a", "none", nil),
		svc("a", "db", map[string]string{"app": "db"}),
		svc("b", "web", map[string]string{"app": "web"}),
	}
	selectorPods = []*corev1.Pod{
		pod("a", "web-1", map[string]string{"app": "web", "env": "prod"}),
		pod("a", "web-2", map[string]string{"app": "web", "env": "dev"}),
		pod("a", "db-1", map[string]string{"app": "db", "env": "prod"}),
		pod("a", "bare", nil),
		pod("b", "web-1", map[string]string{"app": "web"}),
	}
)

// The indexed lookups must give what testing every object with a label selector gives.
func TestServiceMatcherAgreesWithSelectors(t *testing.T) {
	ix := cache.NewIndexer(cache.Indexers[*corev1.Service]{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc[*corev1.Service]})
	for _, s := range selectorServices {
		ix.Add(s)
	}
	m := NewServiceMatcher(ix)
	NewServiceMatcher(ix) // a second controller on the same informer
	for _, p := range selectorPods {
		var want []*corev1.Service
		for _, s := range selectorServices {
			if s.Namespace == p.Namespace && s.Spec.Selector != nil && labels.SelectorFromValidatedSet(s.Spec.Selector).Matches(labels.Set(p.Labels)) {
				want = append(want, s)
			}
		}
		if got := names(m.Matching(p.Namespace, p.Labels)); !slices.Equal(got, names(want)) {
			t.Errorf("pod %s/%s: services %v, want %v", p.Namespace, p.Name, got, names(want))
		}
	}
}

func TestPodSelectorAgreesWithSelectors(t *testing.T) {
	ix := cache.NewIndexer(cache.Indexers[*corev1.Pod]{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc[*corev1.Pod]})
	for _, p := range selectorPods {
		ix.Add(p)
	}
	sel := NewPodSelector(ix)
	NewPodSelector(ix)
	for _, s := range selectorServices {
		if s.Spec.Selector == nil {
			continue
		}
		var want []*corev1.Pod
		for _, p := range selectorPods {
			if p.Namespace == s.Namespace && labels.SelectorFromValidatedSet(s.Spec.Selector).Matches(labels.Set(p.Labels)) {
				want = append(want, p)
			}
		}
		if got := names(sel.Selected(s.Namespace, s.Spec.Selector)); !slices.Equal(got, names(want)) {
			t.Errorf("service %s/%s: pods %v, want %v", s.Namespace, s.Name, got, names(want))
		}
	}
	// Relabelling moves a pod between services.
	moved := selectorPods[1].DeepCopy()
	moved.Labels = map[string]string{"app": "db"}
	ix.Update(moved)
	if got := names(sel.Selected("a", map[string]string{"app": "db"})); !slices.Equal(got, []string{"db-1", "web-2"}) {
		t.Errorf("after relabel: %v", got)
	}
}
