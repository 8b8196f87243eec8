package podautoscaler

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/client"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// scaleClient reads and writes the scale subresource of any kind discovery lists with one:
// Deployments, ReplicaSets, ReplicationControllers, StatefulSets, custom resources.
type scaleClient struct {
	client *client.Client
	now    func() time.Time

	mu sync.Mutex
	// kinds maps a group and kind to its resource, from discovery's preferred versions.
	kinds   map[schema.GroupKind]scaleTarget
	fetched time.Time
}

// scaleTarget is a kind's resource: its path prefix ("/apis/apps/v1", "/api/v1"), its name,
// and whether it has a scale subresource.
type scaleTarget struct {
	prefix, resource string
	scalable         bool
}

// rediscoverAfter: a kind discovery did not list is looked up again at most this often, so
// that an HPA naming an unknown kind does not read all of discovery on every sync.
const rediscoverAfter = 10 * time.Second

// resolve maps a kind to its resource through discovery, read again when the kind is unknown
// and the last read is old enough (a custom resource defined since).
func (s *scaleClient) resolve(ctx context.Context, gk schema.GroupKind) (scaleTarget, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.kinds[gk]; ok {
		return t, nil
	}
	if s.kinds == nil || s.now().Sub(s.fetched) >= rediscoverAfter {
		lists, err := s.client.ServerResources(ctx)
		if err != nil {
			return scaleTarget{}, err
		}
		s.kinds, s.fetched = map[schema.GroupKind]scaleTarget{}, s.now()
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				continue
			}
			prefix := "/apis/" + l.GroupVersion
			if gv.Group == "" {
				prefix = "/api/" + gv.Version
			}
			for _, r := range l.APIResources {
				if strings.Contains(r.Name, "/") {
					continue
				}
				scalable := slices.ContainsFunc(l.APIResources, func(sub metav1.APIResource) bool { return sub.Name == r.Name+"/scale" })
				key := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
				if _, seen := s.kinds[key]; !seen {
					s.kinds[key] = scaleTarget{prefix: prefix, resource: r.Name, scalable: scalable}
				}
			}
		}
	}
	if t, ok := s.kinds[gk]; ok {
		return t, nil
	}
	return scaleTarget{}, fmt.Errorf("no matches for kind %q in group %q", gk.Kind, gk.Group)
}

func (t scaleTarget) path(ns, name string) string {
	return t.prefix + "/namespaces/" + url.PathEscape(ns) + "/" + t.resource + "/" + url.PathEscape(name) + "/scale"
}

func (s *scaleClient) get(ctx context.Context, t scaleTarget, ns, name string) (*autoscalingv1.Scale, error) {
	if !t.scalable {
		return nil, fmt.Errorf("could not find scale subresource for %s in discovery information", t.resource)
	}
	return decodeScale(s.client.Raw(ctx, http.MethodGet, t.path(ns, name), nil, nil))
}

// update writes sc, which must carry the resourceVersion it was read at.
func (s *scaleClient) update(ctx context.Context, t scaleTarget, sc *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	sc.APIVersion, sc.Kind = autoscalingv1.SchemeGroupVersion.String(), "Scale"
	body, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	return decodeScale(s.client.Raw(ctx, http.MethodPut, t.path(sc.Namespace, sc.Name), nil, body))
}

func decodeScale(data []byte, err error) (*autoscalingv1.Scale, error) {
	if err != nil {
		return nil, err
	}
	var sc autoscalingv1.Scale
	if err := json.Unmarshal(data, &sc); err != nil {
		return nil, fmt.Errorf("decoding a Scale: %w", err)
	}
	return &sc, nil
}
