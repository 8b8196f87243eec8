package statefulset

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/controller/revision"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
)

// A StatefulSet's history is a ControllerRevision per pod template it has had, named
// <set>-<hash> and labelled with the template's labels (so the set's selector finds them, as
// kubectl rollout history does) and the hash. Its data is the strategic merge patch that puts
// the template back (what kubectl rollout undo applies), its number orders it (what kubectl
// rollout history lists). Pods carry the name of the revision they were made from.
//
// The set's update revision is the one of its template; its current revision is the one most
// of its pods had when the last rollout completed (status.currentRevision). Pods below a
// RollingUpdate's partition are made from the current revision.

// hashLabel holds a revision's hash, as Kubernetes' controller history labels revisions.
const hashLabel = "controller.kubernetes.io/hash"

// templatePatch is the revision data of a template: {"spec":{"template":{...,"$patch":"replace"}}}
// with keys sorted, byte for byte what kubectl rollout undo compares with the set's template.
func templatePatch(t *corev1.PodTemplateSpec) ([]byte, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	var tmpl map[string]any
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		return nil, err
	}
	tmpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
}

// templateOf reads the template back out of a revision's data. The patch replaces the whole
// template, so applying it is decoding it.
func templateOf(r *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template *corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(r.Data.Raw, &data); err != nil {
		return nil, fmt.Errorf("revision %s: %w", r.Name, err)
	}
	if data.Spec.Template == nil {
		return nil, fmt.Errorf("revision %s holds no pod template", r.Name)
	}
	return data.Spec.Template, nil
}

// revisionHash names a revision: the FNV-32 hash of its data and the set's collision count
// (which grows when a name is taken by other data), in the alphabet of generated names.
func revisionHash(data []byte, collisions int32) string {
	h := fnv.New32()
	h.Write(data)
	h.Write([]byte(strconv.FormatInt(int64(collisions), 10)))
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// history is the set's revisions, oldest first, with its current and update revisions.
type history struct {
	all             []*appsv1.ControllerRevision
	current, update *appsv1.ControllerRevision
	// collisions is the set's collision count after making the update revision.
	collisions int32
}

// sortRevisions orders revisions by number, then age, then name.
func sortRevisions(rs []*appsv1.ControllerRevision) {
	slices.SortStableFunc(rs, func(a, b *appsv1.ControllerRevision) int {
		if c := cmp.Compare(a.Revision, b.Revision); c != 0 {
			return c
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// revisions returns the set's history: its own revisions and the orphans its selector
// matches, which it adopts (a set deleted with --cascade=orphan and made again keeps its
// history). It makes the update revision if the template is new, or renumbers it as the
// newest when the template went back to an earlier one.
func (c *Controller) revisions(ctx context.Context, set *appsv1.StatefulSet, sel labels.Selector) (*history, error) {
	api := client.Resource[*appsv1.ControllerRevision](c.client, "controllerrevisions").Namespace(set.Namespace)
	var owned []*appsv1.ControllerRevision
	var adoptErr error
	checked := false
	for _, r := range c.revs.Lister().Namespace(set.Namespace).List(labels.Everything()) {
		if !sel.Matches(labels.Set(r.Labels)) {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(r)
		switch {
		case ref != nil && ref.UID == set.UID:
			owned = append(owned, r)
		case ref == nil && set.DeletionTimestamp == nil:
			if !checked {
				checked, adoptErr = true, c.canAdopt(ctx, set)
			}
			if adoptErr != nil {
				continue
			}
			adopted, err := adoptRevision(ctx, api, set, r)
			if err != nil {
				if !apierrors.IsNotFound(err) {
					return nil, err
				}
				continue
			}
			owned = append(owned, adopted)
		}
	}
	if adoptErr != nil && !errors.Is(adoptErr, podcontrol.ErrOwnerGone) {
		return nil, adoptErr
	}
	sortRevisions(owned)
	h := &history{all: owned, collisions: deref(set.Status.CollisionCount)}
	data, err := templatePatch(&set.Spec.Template)
	if err != nil {
		return nil, err
	}
	var newest *appsv1.ControllerRevision
	if n := len(owned); n > 0 {
		newest = owned[n-1]
	}
	var equal *appsv1.ControllerRevision
	for _, r := range owned {
		if revision.SameData(r.Data.Raw, data) {
			equal = r // the last equal one: the highest number
		}
	}
	switch {
	case equal != nil && equal == newest:
		h.update = equal
	case equal != nil:
		// Back to an earlier template (kubectl rollout undo): it becomes the newest revision.
		r := equal.DeepCopy()
		r.Revision = newest.Revision + 1
		updated, err := api.Update(ctx, r)
		if err != nil {
			return nil, err
		}
		h.all = slices.DeleteFunc(h.all, func(x *appsv1.ControllerRevision) bool { return x.UID == r.UID })
		h.all = append(h.all, updated)
		h.update = updated
	default:
		number := int64(1)
		if newest != nil {
			number = newest.Revision + 1
		}
		created, err := c.newRevision(ctx, set, data, number, &h.collisions)
		if err != nil {
			return nil, err
		}
		h.update = created
		h.all = append(h.all, created)
	}
	for _, r := range h.all {
		if r.Name == set.Status.CurrentRevision {
			h.current = r
		}
	}
	if h.current == nil {
		h.current = h.update // a new set, or its current revision was deleted
	}
	return h, nil
}

// adoptRevision makes the set the controller of an orphan revision; the revision's UID in the
// patch keeps it from applying to another object of that name.
func adoptRevision(ctx context.Context, api *client.Typed[*appsv1.ControllerRevision], set *appsv1.StatefulSet, r *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": r.UID, "ownerReferences": []metav1.OwnerReference{podcontrol.ControllerRef(set, Kind)}}})
	if err != nil {
		return nil, err
	}
	return api.Patch(ctx, r.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
}

// newRevision stores a revision for data; a name taken by other data raises the collision
// count and tries the next name.
func (c *Controller) newRevision(ctx context.Context, set *appsv1.StatefulSet, data []byte, number int64, collisions *int32) (*appsv1.ControllerRevision, error) {
	api := client.Resource[*appsv1.ControllerRevision](c.client, "controllerrevisions").Namespace(set.Namespace)
	return revision.Create(ctx, api, set, data, collisions, 100, func(collisions int32) *appsv1.ControllerRevision {
		hash := revisionHash(data, collisions)
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{
				Name: revisionName(set.Name, hash), Namespace: set.Namespace,
				Labels:          revision.WithLabel(set.Spec.Template.Labels, hashLabel, hash),
				Annotations:     maps.Clone(set.Annotations),
				OwnerReferences: []metav1.OwnerReference{podcontrol.ControllerRef(set, Kind)},
			},
			Data:     runtime.RawExtension{Raw: data},
			Revision: number,
		}
	})
}

// revisionName is <set>-<hash>, the set's name cut so that the whole is a valid name.
func revisionName(set, hash string) string {
	if len(set) > 223 {
		set = set[:223]
	}
	return set + "-" + hash
}

// prune deletes the oldest revisions beyond revisionHistoryLimit that are neither the current
// nor the update revision nor any pod's (a negative limit keeps them all).
func (c *Controller) prune(ctx context.Context, set *appsv1.StatefulSet, h *history, pods []*corev1.Pod) error {
	limit := int(deref(set.Spec.RevisionHistoryLimit))
	if limit < 0 {
		return nil
	}
	live := map[string]bool{h.current.Name: true, h.update.Name: true}
	for _, p := range pods {
		live[revisionOf(p)] = true
	}
	var old []*appsv1.ControllerRevision
	for _, r := range h.all {
		if !live[r.Name] {
			old = append(old, r)
		}
	}
	api := client.Resource[*appsv1.ControllerRevision](c.client, "controllerrevisions").Namespace(set.Namespace)
	for _, r := range old[:max(len(old)-limit, 0)] {
		err := api.Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &r.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// canAdopt reads the set from the server, not the cache: a set deleted or being deleted must
// not take orphans, and the cache may not know yet.
func (c *Controller) canAdopt(ctx context.Context, set *appsv1.StatefulSet) error {
	fresh, err := client.Resource[*appsv1.StatefulSet](c.client, "statefulsets").Namespace(set.Namespace).Get(ctx, set.Name)
	if apierrors.IsNotFound(err) {
		return podcontrol.ErrOwnerGone
	}
	if err != nil {
		return err
	}
	if fresh.UID != set.UID || fresh.DeletionTimestamp != nil {
		return podcontrol.ErrOwnerGone
	}
	return nil
}
