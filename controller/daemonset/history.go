package daemonset

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/podcontrol"
	"github.com/kplane/kplane/controller/revision"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
)

// A DaemonSet's history is a ControllerRevision per pod template it has had, named
// <daemonset>-<hash>, holding a strategic merge patch that sets the template (what kubectl
// rollout undo applies) and a revision number (what kubectl rollout history lists). Pods carry
// the hash of the revision they were made from.

// templatePatch is the revision data for a template: {"spec":{"template":{...,"$patch":"replace"}}}.
func templatePatch(ds *appsv1.DaemonSet) ([]byte, error) {
	raw, err := json.Marshal(ds.Spec.Template)
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

// revisionHash names a revision: a hash of its data and the DaemonSet's collision count (which
// grows when a name is taken by other data), in the alphabet of generated names.
func revisionHash(data []byte, collisions int32) string {
	h := fnv.New32a()
	h.Write(data)
	h.Write([]byte(strconv.Itoa(int(collisions))))
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// history is the DaemonSet's revisions, the current one (for its template) among them.
type history struct {
	current *appsv1.ControllerRevision
	all     []*appsv1.ControllerRevision
}

// revisions returns the DaemonSet's history, making the current revision if its template is
// new, or renumbering it as the newest when the template went back to an earlier one.
func (c *Controller) revisions(ctx context.Context, ds *appsv1.DaemonSet) (*history, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var owned []*appsv1.ControllerRevision
	for _, r := range c.revs.Lister().Namespace(ds.Namespace).List(labels.Everything()) {
		if metav1.IsControlledBy(r, ds) && sel.Matches(labels.Set(r.Labels)) {
			owned = append(owned, r)
		}
	}
	slices.SortFunc(owned, func(a, b *appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	data, err := templatePatch(ds)
	if err != nil {
		return nil, err
	}
	var newest int64
	if n := len(owned); n > 0 {
		newest = owned[n-1].Revision
	}
	h := &history{all: owned}
	for _, r := range owned {
		if revision.SameData(r.Data.Raw, data) {
			h.current = r
		}
	}
	api := client.Resource[*appsv1.ControllerRevision](c.client, "controllerrevisions").Namespace(ds.Namespace)
	switch {
	case h.current != nil && h.current.Revision < newest:
		// Back to an earlier template (kubectl rollout undo): it becomes the newest revision.
		r := h.current.DeepCopy()
		r.Revision = newest + 1
		updated, err := api.Update(ctx, r)
		if err != nil {
			return nil, err
		}
		h.current = updated
	case h.current == nil:
		created, err := c.newRevision(ctx, ds, data, newest+1)
		if err != nil {
			return nil, err
		}
		h.current = created
		h.all = append(h.all, created)
	}
	return h, nil
}

// newRevision stores a revision for data; a name taken by other data raises the DaemonSet's
// collision count and tries the next name.
func (c *Controller) newRevision(ctx context.Context, ds *appsv1.DaemonSet, data []byte, number int64) (*appsv1.ControllerRevision, error) {
	api := client.Resource[*appsv1.ControllerRevision](c.client, "controllerrevisions").Namespace(ds.Namespace)
	collisions := deref(ds.Status.CollisionCount)
	defer func() {
		if collisions != deref(ds.Status.CollisionCount) {
			ds.Status.CollisionCount = &collisions
		}
	}()
	return revision.Create(ctx, api, ds, data, &collisions, 10, func(collisions int32) *appsv1.ControllerRevision {
		hash := revisionHash(data, collisions)
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{
				Name: ds.Name + "-" + hash, Namespace: ds.Namespace,
				Labels:          revision.WithLabel(ds.Spec.Template.Labels, appsv1.DefaultDaemonSetUniqueLabelKey, hash),
				Annotations:     ds.Annotations,
				OwnerReferences: []metav1.OwnerReference{podcontrol.ControllerRef(ds, Kind)},
			},
			Data:     runtime.RawExtension{Raw: data},
			Revision: number,
		}
	})
}

// prune deletes the oldest revisions beyond revisionHistoryLimit that no pod was made from.
func (c *Controller) prune(ctx context.Context, ds *appsv1.DaemonSet, h *history, inUse map[string]bool) error {
	limit := int(deref(ds.Spec.RevisionHistoryLimit))
	var old []*appsv1.ControllerRevision
	for _, r := range h.all {
		if r.Name != h.current.Name && !inUse[r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] {
			old = append(old, r)
		}
	}
	api := client.Resource[*appsv1.ControllerRevision](c.client, "controllerrevisions").Namespace(ds.Namespace)
	for _, r := range old[:max(len(old)-limit, 0)] {
		if err := api.Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
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
