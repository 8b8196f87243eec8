package namespace

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// contentResource is one namespaced resource whose objects a terminating namespace loses.
type contentResource struct {
	GroupVersion string // "v1", "apps/v1"
	Resource     string // "pods"
	// DeleteCollection: the server takes DELETE on the collection; else each object is
	// listed and deleted.
	DeleteCollection bool
}

// path is the collection's URL path in namespace ns.
func (r contentResource) path(ns string) string {
	prefix := "/apis/" + r.GroupVersion
	if !strings.Contains(r.GroupVersion, "/") {
		prefix = "/api/" + r.GroupVersion
	}
	return prefix + "/namespaces/" + ns + "/" + r.Resource
}

func (r contentResource) String() string { return r.Resource + "." + r.GroupVersion }

// gvr is the resource's group, version and resource.
func (r contentResource) gvr() schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(r.GroupVersion) // from discovery, which parsed it already
	return gv.WithResource(r.Resource)
}

// contentResources picks, from discovery, the namespaced resources that can be listed and
// deleted (subresources skipped), once each, in discovery order.
func contentResources(lists []*metav1.APIResourceList) []contentResource {
	var out []contentResource
	seen := map[string]bool{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			if !r.Namespaced || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			collection := slices.Contains(r.Verbs, "deletecollection")
			if !collection && !slices.Contains(r.Verbs, "delete") {
				continue
			}
			cr := contentResource{GroupVersion: l.GroupVersion, Resource: r.Name, DeleteCollection: collection}
			if seen[cr.String()] {
				continue
			}
			seen[cr.String()] = true
			out = append(out, cr)
		}
	}
	return out
}

// podGraceEstimate is how long, from the namespace's deletion, its pods may still take to
// terminate: the longest grace period of its pods not yet terminated, or 0 once that much
// time has passed since deletedAt.
func podGraceEstimate(pods []corev1.Pod, deletedAt, now time.Time) time.Duration {
	var longest time.Duration
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if p.Spec.TerminationGracePeriodSeconds != nil {
			grace = *p.Spec.TerminationGracePeriodSeconds
		}
		longest = max(longest, time.Duration(grace)*time.Second)
	}
	if now.Sub(deletedAt) >= longest {
		return 0
	}
	return longest
}

// finalizerEstimate is how long to wait when what remains is held only by finalizers.
const finalizerEstimate = 15 * time.Second

// outcome is what one pass over a namespace's content found.
type outcome struct {
	discoveryErr error
	deleteErrs   []string       // "resource: error"
	remaining    map[string]int // resource → objects left
	finalizers   map[string]int // finalizer → objects left holding it
}

// conditions are the namespace's deletion conditions for o, each True with what is wrong or
// False with the reason things are fine, as Kubernetes reports them.
func (o outcome) conditions(now metav1.Time) []corev1.NamespaceCondition {
	cond := func(t corev1.NamespaceConditionType, bad bool, badReason, goodReason, msg string) corev1.NamespaceCondition {
		c := corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, Reason: goodReason, LastTransitionTime: now}
		if bad {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, badReason, msg
		}
		return c
	}
	discoveryMsg := ""
	if o.discoveryErr != nil {
		discoveryMsg = "Discovery failed: " + o.discoveryErr.Error()
	}
	return []corev1.NamespaceCondition{
		cond(corev1.NamespaceDeletionDiscoveryFailure, o.discoveryErr != nil, "DiscoveryFailed", "ResourcesDiscovered", discoveryMsg),
		cond(corev1.NamespaceDeletionGVParsingFailure, false, "GroupVersionParsingFailed", "ParsedGroupVersions", ""),
		cond(corev1.NamespaceDeletionContentFailure, len(o.deleteErrs) > 0, "ContentDeletionFailed", "ContentDeleted",
			"Failed to delete all resource types, "+strconv.Itoa(len(o.deleteErrs))+" remaining: "+strings.Join(o.deleteErrs, ", ")),
		cond(corev1.NamespaceContentRemaining, len(o.remaining) > 0, "SomeResourcesRemain", "ContentRemoved",
			"Some resources are remaining: "+counts(o.remaining, "instances")),
		cond(corev1.NamespaceFinalizersRemaining, len(o.finalizers) > 0, "SomeFinalizersRemain", "ContentHasNoFinalizers",
			"Some content in the namespace has finalizers remaining: "+counts(o.finalizers, "resource instances")),
	}
}

// withConditions returns status with conds merged in (a condition whose status, reason and
// message are unchanged keeps its transition time), and whether anything changed.
func withConditions(status corev1.NamespaceStatus, conds []corev1.NamespaceCondition) (corev1.NamespaceStatus, bool) {
	out := status
	out.Conditions = slices.Clone(status.Conditions)
	changed := false
	for _, c := range conds {
		i := slices.IndexFunc(out.Conditions, func(x corev1.NamespaceCondition) bool { return x.Type == c.Type })
		switch {
		case i < 0:
			out.Conditions = append(out.Conditions, c)
			changed = true
		case out.Conditions[i].Status != c.Status || out.Conditions[i].Reason != c.Reason || out.Conditions[i].Message != c.Message:
			out.Conditions[i] = c
			changed = true
		}
	}
	return out, changed
}

// counts formats "a has 2 instances, b has 1 instances", sorted by name.
func counts(m map[string]int, what string) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " has " + strconv.Itoa(m[k]) + " " + what
	}
	return strings.Join(parts, ", ")
}
