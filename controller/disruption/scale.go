package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/client"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// A budget given as maxUnavailable or as a percent counts against what the pods' controllers
// want, not against the pods that happen to exist: the sum of the scale of every controller
// of a matching pod. ReplicationControllers, ReplicaSets and Deployments are read from the
// informers; any other controller (a StatefulSet, a custom resource) through its scale
// subresource, found in discovery.

// owned is one controller of matching pods and the replicas it wants.
type owned struct {
	uid      types.UID
	replicas int32
}

// expectedScale returns the summed scale of the controllers of pods. Pods without a
// controller are returned as unmanaged (they count for nothing); a pod whose controller cannot
// be found is an error.
func (c *Controller) expectedScale(ctx context.Context, pods []*corev1.Pod) (int32, []string, error) {
	scales := map[types.UID]int32{} // by the UID of the workload found
	seen := map[types.UID]bool{}    // by the UID of the pods' controller references
	var unmanaged []string
	for _, p := range pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil {
			unmanaged = append(unmanaged, p.Name)
			continue
		}
		if seen[ref.UID] {
			continue
		}
		seen[ref.UID] = true
		o, err := c.controllerOf(ctx, ref, p.Namespace)
		if err != nil {
			return 0, nil, err
		}
		if o == nil {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", p.Name)
		}
		// Keyed by what was found: the pods of one Deployment's ReplicaSets count it once.
		scales[o.uid] = o.replicas
	}
	var sum int32
	for _, n := range scales {
		sum += n
	}
	return sum, unmanaged, nil
}

// controllerOf finds the workload behind a pod's controller reference: nil if it is gone or
// replaced (another UID).
func (c *Controller) controllerOf(ctx context.Context, ref *metav1.OwnerReference, ns string) (*owned, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, err
	}
	appsGroup := gv.Group == "apps" || gv.Group == "extensions"
	switch {
	case ref.Kind == "ReplicationController" && gv.Group == "":
		rc, err := c.rcs.Lister().Namespace(ns).Get(ref.Name)
		if err != nil || rc.UID != ref.UID {
			return nil, nil
		}
		return &owned{rc.UID, deref(rc.Spec.Replicas, 1)}, nil
	case ref.Kind == "ReplicaSet" && appsGroup:
		rs, err := c.rss.Lister().Namespace(ns).Get(ref.Name)
		if err != nil || rs.UID != ref.UID {
			return nil, nil
		}
		// A Deployment's ReplicaSets come and go during a rollout: the Deployment's replicas
		// are what its pods should number.
		if d := metav1.GetControllerOfNoCopy(rs); d != nil && d.Kind == "Deployment" {
			if dgv, err := schema.ParseGroupVersion(d.APIVersion); err == nil && (dgv.Group == "apps" || dgv.Group == "extensions") {
				if dep, err := c.deps.Lister().Namespace(ns).Get(d.Name); err == nil && dep.UID == d.UID {
					return &owned{dep.UID, deref(dep.Spec.Replicas, 1)}, nil
				}
			}
		}
		return &owned{rs.UID, deref(rs.Spec.Replicas, 1)}, nil
	}
	return c.scales.get(ctx, ref, gv, ns)
}

func deref(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// scaleClient reads the scale subresource of any kind discovery lists with one.
type scaleClient struct {
	client *client.Client
	now    func() time.Time

	mu sync.Mutex
	// kinds maps a group and kind to its resource's path prefix ("/apis/apps/v1/statefulsets"
	// without the namespace) and whether it has a scale subresource.
	kinds   map[schema.GroupKind]scalable
	fetched time.Time
}

type scalable struct {
	groupVersion, resource string
	scale                  bool
}

// rediscoverAfter: a kind discovery did not list is looked up again at most this often.
const rediscoverAfter = 10 * time.Second

func (s *scaleClient) get(ctx context.Context, ref *metav1.OwnerReference, gv schema.GroupVersion, ns string) (*owned, error) {
	gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
	k, err := s.lookup(ctx, gk)
	if err != nil {
		return nil, err
	}
	prefix := "/apis/" + k.groupVersion
	if k.groupVersion == "v1" {
		prefix = "/api/v1"
	}
	path := fmt.Sprintf("%s/namespaces/%s/%s/%s/scale", prefix, ns, k.resource, ref.Name)
	data, err := s.client.Raw(ctx, http.MethodGet, path, nil, nil)
	if apierrors.IsNotFound(err) {
		if !k.scale {
			return nil, fmt.Errorf("%s does not implement the scale subresource", schema.GroupResource{Group: gv.Group, Resource: k.resource})
		}
		return nil, nil // the controller is gone
	}
	if err != nil {
		return nil, err
	}
	var sc autoscalingv1.Scale
	if err := json.Unmarshal(data, &sc); err != nil {
		return nil, fmt.Errorf("scale of %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	if sc.UID != ref.UID {
		return nil, nil
	}
	return &owned{sc.UID, sc.Spec.Replicas}, nil
}

// lookup maps a kind to its resource through discovery, read again when the kind is missing
// and the last read is old enough.
func (s *scaleClient) lookup(ctx context.Context, gk schema.GroupKind) (scalable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.kinds[gk]; ok {
		return k, nil
	}
	if s.kinds != nil && s.now().Sub(s.fetched) < rediscoverAfter {
		return scalable{}, fmt.Errorf("no resource of kind %s is served", gk)
	}
	lists, err := s.client.ServerResources(ctx)
	if err != nil {
		return scalable{}, err
	}
	s.kinds, s.fetched = map[schema.GroupKind]scalable{}, s.now()
	for _, l := range lists {
		g, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			scale := slices.ContainsFunc(l.APIResources, func(sub metav1.APIResource) bool {
				return sub.Name == r.Name+"/scale" && sub.Kind == "Scale"
			})
			key := schema.GroupKind{Group: g.Group, Kind: r.Kind}
			if _, seen := s.kinds[key]; !seen {
				s.kinds[key] = scalable{groupVersion: l.GroupVersion, resource: r.Name, scale: scale}
			}
		}
	}
	if k, ok := s.kinds[gk]; ok {
		return k, nil
	}
	return scalable{}, fmt.Errorf("no resource of kind %s is served", gk)
}
