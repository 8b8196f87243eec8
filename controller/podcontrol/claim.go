package podcontrol

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ErrOwnerGone: the owner was deleted or replaced (same name, another UID) since the cache
// showed it; it must not adopt pods.
var ErrOwnerGone = errors.New("owner deleted or replaced")

// Owner is an object that controls pods through a selector.
type Owner struct {
	Object metav1.Object
	GVK    schema.GroupVersionKind
	// Finalizer, if set, goes onto the pods the owner adopts (a Job's tracking finalizer).
	Finalizer string
	// Fresh reads the owner from the server, not the cache: an owner deleted or being
	// deleted must not take pods, and the cache may not know yet.
	Fresh func(context.Context) (metav1.Object, error)
}

// ControllerRef is the owner reference that makes o the controller of what carries it.
func ControllerRef(o metav1.Object, gvk schema.GroupVersionKind) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
		Name: o.GetName(), UID: o.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes,
	}
}

// Claim returns the pods the owner controls and its selector matches, adopting matching
// orphans (unless the owner is being deleted) and releasing owned pods that no longer match.
func Claim(ctx context.Context, c *client.Client, owner Owner, sel labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var (
		owned     []*corev1.Pod
		errs      []error
		checked   bool
		adoptable error
	)
	uid := owner.Object.GetUID()
	deleting := owner.Object.GetDeletionTimestamp() != nil
	for _, p := range pods {
		matches := sel.Matches(labels.Set(p.Labels))
		ref := metav1.GetControllerOfNoCopy(p)
		switch {
		case ref != nil && ref.UID != uid:
			// Someone else's.
		case ref != nil && matches:
			owned = append(owned, p)
		case ref != nil:
			if deleting {
				continue
			}
			err := patchMeta(ctx, c, p, map[string]any{"ownerReferences": []any{map[string]any{"$patch": "delete", "uid": uid}}})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		case matches && !deleting && p.DeletionTimestamp == nil:
			if !checked {
				checked, adoptable = true, canAdopt(ctx, owner)
				if adoptable != nil {
					errs = append(errs, adoptable)
				}
			}
			if adoptable != nil {
				continue
			}
			meta := map[string]any{"ownerReferences": []any{ControllerRef(owner.Object, owner.GVK)}}
			if owner.Finalizer != "" && !slices.Contains(p.Finalizers, owner.Finalizer) {
				meta["finalizers"] = []string{owner.Finalizer}
			}
			if err := patchMeta(ctx, c, p, meta); err != nil {
				if !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
				continue
			}
			owned = append(owned, p)
		}
	}
	return owned, errors.Join(errs...)
}

func canAdopt(ctx context.Context, owner Owner) error {
	fresh, err := owner.Fresh(ctx)
	if err != nil {
		return err
	}
	if fresh.GetUID() != owner.Object.GetUID() || fresh.GetDeletionTimestamp() != nil {
		return ErrOwnerGone
	}
	return nil
}

// patchMeta applies a strategic merge patch of the pod's metadata; the pod's UID in it makes
// the patch fail if the name now belongs to another pod.
func patchMeta(ctx context.Context, c *client.Client, pod *corev1.Pod, meta map[string]any) error {
	meta["uid"] = pod.UID
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = client.Resource[*corev1.Pod](c, "pods").Namespace(pod.Namespace).
		Patch(ctx, pod.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
	return err
}

// NewPod is a pod made from tmpl for owner: in its namespace, controlled by it, named
// generateName plus a random suffix.
func NewPod(owner metav1.Object, gvk schema.GroupVersionKind, tmpl *corev1.PodTemplateSpec, generateName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    generateName,
			Namespace:       owner.GetNamespace(),
			Labels:          maps.Clone(tmpl.Labels),
			Annotations:     maps.Clone(tmpl.Annotations),
			Finalizers:      slices.Clone(tmpl.Finalizers),
			OwnerReferences: []metav1.OwnerReference{ControllerRef(owner, gvk)},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
}
