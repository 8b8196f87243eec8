// Package revision holds what the controllers that keep ControllerRevisions (DaemonSets,
// StatefulSets) share: comparing revision data and storing a new revision under a hashed
// name, raising the owner's collision count when a name is taken by other data. Each
// controller keeps its own history (which revision is current, what to prune).
package revision

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/kplane/kplane/client"
	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SameData reports whether two revisions' data are the same: byte for byte, or as JSON values
// (key order and spacing aside), so that a revision written by another serializer does not
// start a rollout.
func SameData(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return apiequality.Semantic.DeepEqual(x, y)
}

// Create stores the revision build makes for the owner's current collision count. A name
// already taken by a revision of the owner with the same data is that revision (an earlier
// sync made it; the cache had not shown it yet); taken by other data, it raises *collisions
// and tries the next name, up to attempts times.
func Create(ctx context.Context, api *client.Typed[*appsv1.ControllerRevision], owner metav1.Object, data []byte,
	collisions *int32, attempts int, build func(collisions int32) *appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	for range attempts {
		r := build(*collisions)
		created, err := api.Create(ctx, r)
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		existing, err := api.Get(ctx, r.Name)
		if err != nil {
			return nil, err
		}
		if metav1.IsControlledBy(existing, owner) && SameData(existing.Data.Raw, data) {
			return existing, nil
		}
		*collisions++
	}
	return nil, fmt.Errorf("no free name for a revision of %s/%s", owner.GetNamespace(), owner.GetName())
}

// WithLabel returns a copy of m with k set to v.
func WithLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}
