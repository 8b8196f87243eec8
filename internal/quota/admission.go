package quota

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Request is one write quota admission judges.
type Request struct {
	Resource    schema.GroupResource
	Subresource string
	Operation   Operation
	Object      runtime.Object
	// Old is the stored object an update replaces (nil on create).
	Old runtime.Object
	// Now is the time pods' grace periods are judged at.
	Now time.Time
}

// Refusal is a write quota admission refuses; its text is Kubernetes' message, which the
// apiserver answers with 403 Forbidden.
type Refusal struct{ Message string }

func (r *Refusal) Error() string { return r.Message }

func refuse(format string, args ...any) error { return &Refusal{Message: fmt.Sprintf(format, args...)} }

// Check decides whether req fits the quotas of its namespace, as Kubernetes' ResourceQuota
// admission does. Every quota that matches the object must have room for the usage the write
// adds (on update: what it adds beyond the stored object's usage); a quota whose status does
// not yet count a resource it limits refuses, since nothing says how much is left. It returns
// the quotas with that usage added to status.used (those unchanged are equal to the input; the
// caller writes the others), or a *Refusal, or another error for a quota it cannot evaluate.
// Quotas are judged in the order given; status.hard, not spec.hard, is what they enforce.
func Check(quotas []corev1.ResourceQuota, req Request) ([]corev1.ResourceQuota, error) {
	if len(quotas) == 0 || Ignored(req.Resource) {
		return quotas, nil
	}
	e := For(req.Resource)
	if !e.Handles(req.Operation, req.Subresource, req.Object, req.Old) {
		return quotas, nil
	}
	var interesting []int
	for i := range quotas {
		q := &quotas[i]
		match, err := Matches(q, e, req.Object)
		if err != nil {
			return nil, fmt.Errorf("error matching scopes of quota %s, err: %v", q.Name, err)
		}
		if !match {
			continue
		}
		limited := e.Matching(Names(q.Status.Hard))
		if err := e.Constraints(limited, req.Object); err != nil {
			return nil, refuse("failed quota: %s: %v", q.Name, err)
		}
		if !counted(q, limited) {
			return nil, refuse("status unknown for quota: %s, resources: %s", q.Name, FormatNames(limited))
		}
		interesting = append(interesting, i)
	}
	usage, err := e.Usage(req.Object, req.Now)
	if err != nil {
		return nil, err
	}
	if neg := Negative(usage); len(neg) > 0 {
		return nil, refuse("quota usage is negative for resource(s): %s", FormatNames(neg))
	}
	if len(interesting) == 0 {
		return quotas, nil
	}
	delta := make(map[int]corev1.ResourceList, len(interesting))
	for _, i := range interesting {
		delta[i] = usage
	}
	if req.Operation == Update {
		if req.Old == nil {
			return nil, refuse("unable to get previous usage since prior version of object was not found")
		}
		// An old object never stored (no resourceVersion) is a create by update: charged in full.
		if m, err := meta.Accessor(req.Old); err == nil && m.GetResourceVersion() != "" {
			prev, err := e.Usage(req.Old, req.Now)
			if err != nil {
				return nil, err
			}
			d := SubtractNonNegative(usage, prev)
			for _, i := range interesting {
				// A quota the old object already fell in was charged for it; one it did not
				// (the update moved it into the quota's scope) is charged in full.
				matched, err := Matches(&quotas[i], e, req.Old)
				if err != nil {
					return nil, fmt.Errorf("error matching scopes of quota %s, err: %v", quotas[i].Name, err)
				}
				if matched {
					delta[i] = d
				}
			}
		}
	}
	for i, d := range delta {
		if d = RemoveZeros(d); len(d) == 0 {
			delete(delta, i)
		} else {
			delta[i] = d
		}
	}
	if len(delta) == 0 {
		return quotas, nil
	}
	out := make([]corev1.ResourceQuota, len(quotas))
	for i := range quotas {
		quotas[i].DeepCopyInto(&out[i])
	}
	for _, i := range interesting {
		d, ok := delta[i]
		if !ok {
			continue
		}
		q := &out[i]
		hard := q.Status.Hard
		requested := Mask(d, Names(hard))
		used := Add(q.Status.Used, requested)
		// Status writes (a claim's allocated storage growing) are charged, never refused: the
		// storage is already there.
		if req.Subresource != "status" {
			if over := Exceeded(Mask(used, Names(requested)), hard); len(over) > 0 {
				return nil, refuse("exceeded quota: %s, requested: %s, used: %s, limited: %s", q.Name,
					Format(Mask(requested, over)), Format(Mask(q.Status.Used, over)), Format(Mask(hard, over)))
			}
		}
		q.Status.Used = used
	}
	return out, nil
}

// counted reports whether a quota's status has a usage for every one of names it limits.
func counted(q *corev1.ResourceQuota, names []corev1.ResourceName) bool {
	for name := range q.Status.Hard {
		if !slices.Contains(names, name) {
			continue
		}
		if _, ok := q.Status.Used[name]; !ok {
			return false
		}
	}
	return true
}

// SortByName orders quotas by name, the order admission judges them in (so that the quota a
// refusal names does not depend on the order a store lists them in).
func SortByName(quotas []corev1.ResourceQuota) {
	slices.SortFunc(quotas, func(a, b corev1.ResourceQuota) int { return strings.Compare(a.Name, b.Name) })
}
