package controller

import (
	"github.com/kplane/kplane/cache"
	corev1 "k8s.io/api/core/v1"
)

// serviceSelectorIndex indexes Services by one label pair of their selector.
const serviceSelectorIndex = "kplane.io/service-selector"

// ServiceMatcher finds the Services whose selector matches a pod's labels. Kubernetes' controllers
// test every Service of the namespace against each pod event; with a thousand Services and ten
// thousand pods that is ten million selector matches for one initial sync. Here each Service is
// indexed under one pair of its selector (the smallest key), so a pod looks only at the Services
// indexed under one of its own labels, plus those with an empty selector, which select every pod.
type ServiceMatcher struct {
	services *cache.Indexer[*corev1.Service]
}

// NewServiceMatcher adds the selector index to a Services informer's indexer (once: controllers sharing
// the informer share the index) and returns a matcher reading it.
func NewServiceMatcher(services *cache.Indexer[*corev1.Service]) *ServiceMatcher {
	// The only possible error is that another controller added the same index already.
	_ = services.AddIndexers(cache.Indexers[*corev1.Service]{serviceSelectorIndex: selectorIndexValue})
	return &ServiceMatcher{services: services}
}

// selectorIndexValue: nothing for a Service without a selector (it selects no pods), "ns/" for
// an empty selector, else "ns/key=value" for the smallest key.
func selectorIndexValue(svc *corev1.Service) ([]string, error) {
	sel := svc.Spec.Selector
	if sel == nil {
		return nil, nil
	}
	first := ""
	for k := range sel {
		if first == "" || k < first {
			first = k
		}
	}
	if first == "" {
		return []string{svc.Namespace + "/"}, nil
	}
	return []string{svc.Namespace + "/" + first + "=" + sel[first]}, nil
}

// Matching returns the Services of namespace ns whose selector matches podLabels. The objects
// are the cache's: do not modify them.
func (m *ServiceMatcher) Matching(ns string, podLabels map[string]string) []*corev1.Service {
	out, _ := m.services.ByIndex(serviceSelectorIndex, ns+"/")
	for k, v := range podLabels {
		candidates, _ := m.services.ByIndex(serviceSelectorIndex, ns+"/"+k+"="+v)
		for _, svc := range candidates {
			if selects(svc.Spec.Selector, podLabels) {
				out = append(out, svc)
			}
		}
	}
	return out
}

// selects reports whether every pair of selector is in podLabels.
func selects(selector, podLabels map[string]string) bool {
	for k, v := range selector {
		if got, ok := podLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// podLabelIndex indexes pods by each of their label pairs.
const podLabelIndex = "kplane.io/pod-labels"

// PodSelector lists the pods a Service selects. Listing the namespace and testing each pod,
// as Kubernetes does, costs a thousand Services in a namespace of ten thousand pods ten
// million tests per full resync; here pods are indexed by their label pairs and a Service
// reads only the pods that carry one pair of its selector.
type PodSelector struct {
	pods *cache.Indexer[*corev1.Pod]
}

// NewPodSelector adds the label index to a pods informer's indexer (once, shared by every controller
// on it) and returns a selector reading it.
func NewPodSelector(pods *cache.Indexer[*corev1.Pod]) *PodSelector {
	// The only possible error is that another controller added the same index already. The
	// namespace index, which every informer has, serves empty selectors.
	_ = pods.AddIndexers(cache.Indexers[*corev1.Pod]{podLabelIndex: podLabelValues})
	return &PodSelector{pods: pods}
}

func podLabelValues(p *corev1.Pod) ([]string, error) {
	out := make([]string, 0, len(p.Labels))
	for k, v := range p.Labels {
		out = append(out, p.Namespace+"/"+k+"="+v)
	}
	return out, nil
}

// Selected returns the pods of namespace ns that selector (a Service's, not nil) selects; an
// empty selector selects every pod of the namespace. The objects are the cache's: do not
// modify them.
func (s *PodSelector) Selected(ns string, selector map[string]string) []*corev1.Pod {
	first := ""
	for k := range selector {
		if first == "" || k < first {
			first = k
		}
	}
	if first == "" {
		pods, _ := s.pods.ByIndex(cache.NamespaceIndex, ns)
		return pods
	}
	candidates, _ := s.pods.ByIndex(podLabelIndex, ns+"/"+first+"="+selector[first])
	out := candidates[:0]
	for _, p := range candidates {
		if selects(selector, p.Labels) {
			out = append(out, p)
		}
	}
	return out
}
