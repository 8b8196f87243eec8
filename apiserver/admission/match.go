package admission

import (
	"context"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Attributes describe one request admission judges.
type Attributes struct {
	Operation   admissionv1.Operation
	Kind        schema.GroupVersionKind
	Resource    schema.GroupVersionResource
	Subresource string
	Name        string
	Namespace   string
	// Namespaced is the resource's scope.
	Namespaced bool
	// Object is the object to be written (nil for DELETE); OldObject the stored one (nil for
	// CREATE). Mutations replace Object.
	Object, OldObject runtime.Object
	// Options are the request's CreateOptions, UpdateOptions or DeleteOptions.
	Options runtime.Object
	DryRun  bool
	User    authenticationv1.UserInfo
	// Equivalents are the other versions the resource is served at.
	Equivalents []Version
	// RequestKind and RequestResource are what the client wrote through, when Kind and
	// Resource are an equivalent version's (zero otherwise: the same).
	RequestKind     schema.GroupVersionKind
	RequestResource schema.GroupVersionResource
}

// AsVersion returns the request as seen at version v: its objects converted, its kind and
// resource v's, the client's kept as the request's.
func (a *Attributes) AsVersion(ctx context.Context, v Version) (*Attributes, error) {
	out := *a
	out.Kind, out.Resource, out.RequestKind, out.RequestResource = v.Kind, v.Resource, a.Kind, a.Resource
	var err error
	if a.Object != nil {
		if out.Object, err = v.To(ctx, a.Object); err != nil {
			return nil, err
		}
	}
	if a.OldObject != nil {
		if out.OldObject, err = v.To(ctx, a.OldObject); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// MatchingVersion decides which version of the request rules see: the request's own when
// they name it; with matchPolicy Equivalent (the default), else the first other version they
// name. ok is false when none matches.
func MatchingVersion(rules []admissionregistrationv1.RuleWithOperations, policy *admissionregistrationv1.MatchPolicyType, a *Attributes) (v *Version, ok bool) {
	if RulesMatch(rules, a) {
		return nil, true
	}
	if policy != nil && *policy == admissionregistrationv1.Exact {
		return nil, false
	}
	for i := range a.Equivalents {
		e := &a.Equivalents[i]
		probe := *a
		probe.Kind, probe.Resource = e.Kind, e.Resource
		if RulesMatch(rules, &probe) {
			return e, true
		}
	}
	return nil, false
}

// Version is another version a request's resource is served at, for rules that name it
// (matchPolicy Equivalent): its kind and resource, and how the request's objects convert to
// it and back.
type Version struct {
	Kind     schema.GroupVersionKind
	Resource schema.GroupVersionResource
	To       func(context.Context, runtime.Object) (runtime.Object, error)
	From     func(context.Context, runtime.Object) (runtime.Object, error)
}

// NamespaceLabels returns the labels of a namespace, for namespace selectors.
type NamespaceLabels func(ctx context.Context, name string) (map[string]string, error)

// ruleMatches reports whether a rule names the request's operation, group, version, resource
// (with its subresource) and scope, with Kubernetes' wildcards: "*" for any, "pods/*" for
// every subresource of pods, "*/status" for the status of anything, "*/*" for everything.
func ruleMatches(r admissionregistrationv1.RuleWithOperations, a *Attributes) bool {
	if !slices.ContainsFunc(r.Operations, func(op admissionregistrationv1.OperationType) bool {
		return op == admissionregistrationv1.OperationAll || string(op) == string(a.Operation)
	}) {
		return false
	}
	if !matchesOne(r.APIGroups, a.Resource.Group) || !matchesOne(r.APIVersions, a.Resource.Version) {
		return false
	}
	if !slices.ContainsFunc(r.Resources, func(pattern string) bool { return resourceMatches(pattern, a.Resource.Resource, a.Subresource) }) {
		return false
	}
	if r.Scope != nil {
		switch *r.Scope {
		case admissionregistrationv1.ClusterScope:
			return !a.Namespaced
		case admissionregistrationv1.NamespacedScope:
			return a.Namespaced
		}
	}
	return true
}

func matchesOne(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

func resourceMatches(pattern, resource, subresource string) bool {
	res, sub, hasSub := strings.Cut(pattern, "/")
	if res != "*" && res != resource {
		return false
	}
	if !hasSub {
		return subresource == ""
	}
	return sub == "*" || sub == subresource
}

// RulesMatch reports whether any of rules matches the request.
func RulesMatch(rules []admissionregistrationv1.RuleWithOperations, a *Attributes) bool {
	return slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool { return ruleMatches(r, a) })
}

// NamespaceSelected reports whether a namespace selector selects the request: the labels of the
// request's namespace, or of the Namespace itself when it is the object; any other
// cluster-scoped object is always selected.
func NamespaceSelected(ctx context.Context, sel *metav1.LabelSelector, a *Attributes, nsLabels NamespaceLabels) (bool, error) {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if a.Resource.Group == "" && a.Resource.Resource == "namespaces" {
		return s.Matches(labels.Set(labelsOf(a.Object, a.OldObject))), nil
	}
	if !a.Namespaced {
		return true, nil
	}
	l, err := nsLabels(ctx, a.Namespace)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}

// ObjectSelected reports whether an object selector selects the object or the stored one.
func ObjectSelected(sel *metav1.LabelSelector, a *Attributes) (bool, error) {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	for _, o := range []runtime.Object{a.Object, a.OldObject} {
		if o == nil {
			continue
		}
		if m, err := meta.Accessor(o); err == nil && s.Matches(labels.Set(m.GetLabels())) {
			return true, nil
		}
	}
	return false, nil
}

func labelsOf(objs ...runtime.Object) map[string]string {
	for _, o := range objs {
		if o == nil {
			continue
		}
		if m, err := meta.Accessor(o); err == nil {
			return m.GetLabels()
		}
	}
	return nil
}

// Exempt reports whether a resource is never subject to admission webhooks and policies: their
// own configurations, so a broken webhook can always be removed.
func Exempt(gr schema.GroupResource) bool {
	if gr.Group != admissionregistrationv1.GroupName {
		return false
	}
	switch gr.Resource {
	case "validatingwebhookconfigurations", "mutatingwebhookconfigurations",
		"validatingadmissionpolicies", "validatingadmissionpolicybindings",
		"mutatingadmissionpolicies", "mutatingadmissionpolicybindings":
		return true
	}
	return false
}
