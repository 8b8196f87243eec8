package scheduler

import (
	"fmt"
	"sort"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/internal/podresources"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Used is what the pods on one node take from it: how many there are and the sum of their
// requests (podresources.Requests, as kube-scheduler's NodeResourcesFit counts them).
type Used struct {
	Pods      int
	Requested corev1.ResourceList
}

// usage sums, per node, the pods bound to it that have not finished, and those bound by this
// scheduler that the cache does not show bound yet, but for the pod except (the one being
// placed: it does not take room from itself). Callers hold s.mu.
func (s *Scheduler) usage(except string) map[string]*Used {
	out := map[string]*Used{}
	count := func(node string, p *corev1.Pod) {
		u := out[node]
		if u == nil {
			u = &Used{Requested: corev1.ResourceList{}}
			out[node] = u
		}
		u.Pods++
		for name, q := range podresources.Requests(p) {
			v := u.Requested[name]
			v.Add(q)
			u.Requested[name] = v
		}
	}
	for _, p := range s.pods.Lister().List(labels.Everything()) {
		if p.Spec.NodeName != "" && !terminal(p) {
			count(p.Spec.NodeName, p)
		}
	}
	// Pods this scheduler bound that the cache does not show bound yet, and pods waiting on
	// a node for their claims, take their room there too.
	for _, placed := range []map[string]string{s.assumed, s.binding} {
		for key, node := range placed {
			if key == except {
				continue
			}
			ns, name, _ := cache.SplitKey(key)
			p, err := s.pods.Lister().Namespace(ns).Get(name)
			if err != nil || p.Spec.NodeName != "" {
				continue // gone, or counted above
			}
			count(node, p)
		}
	}
	return out
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// Insufficient lists why node has no room for a pod requesting requests beside what its pods
// use (used may be nil), in kube-scheduler's words: "Too many pods" when allocatable pods are
// taken, "Insufficient <resource>" for each requested resource whose allocatable amount, less
// what the node's pods request, is smaller than the request. Empty: the pod fits.
func Insufficient(requests corev1.ResourceList, node *corev1.Node, used *Used) []string {
	if used == nil {
		used = &Used{}
	}
	alloc := node.Status.Allocatable
	var why []string
	if int64(used.Pods)+1 > alloc.Pods().Value() {
		why = append(why, "Too many pods")
	}
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, string(name))
	}
	sort.Strings(names) // cpu and memory before the rest, as it happens, and stable
	for _, n := range names {
		name := corev1.ResourceName(n)
		want := requests[name]
		if name == corev1.ResourcePods || want.Sign() <= 0 {
			continue
		}
		free := alloc[name].DeepCopy()
		if taken, ok := used.Requested[name]; ok {
			free.Sub(taken)
		}
		if want.Cmp(free) > 0 {
			why = append(why, fmt.Sprintf("Insufficient %s", name))
		}
	}
	return why
}

// fitResources keeps the nodes of fit with room for pod, counting each reason the others
// lack it into misfits.
func fitResources(pod *corev1.Pod, fit []*corev1.Node, usage map[string]*Used, misfits map[string]int) []*corev1.Node {
	requests := podresources.Requests(pod)
	roomy := fit[:0:0]
	for _, n := range fit {
		why := Insufficient(requests, n, usage[n.Name])
		for _, w := range why {
			misfits[w]++
		}
		if len(why) == 0 {
			roomy = append(roomy, n)
		}
	}
	return roomy
}
