package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// acceptDiscovery asks for the aggregated discovery documents, or the legacy ones from a
// server without them.
const acceptDiscovery = mimeJSON + ";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," + mimeJSON

// discoveryCache holds the last aggregated discovery document of each path with its ETag, so
// that asking again (controllers rediscover every half minute) costs the server a 304.
type discoveryCache struct {
	mu   sync.Mutex
	docs map[string]cachedDiscovery
}

type cachedDiscovery struct {
	etag string
	list *apidiscoveryv2.APIGroupDiscoveryList
}

func (d *discoveryCache) get(path string) cachedDiscovery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.docs[path]
}

func (d *discoveryCache) put(path string, doc cachedDiscovery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.docs == nil {
		d.docs = map[string]cachedDiscovery{}
	}
	d.docs[path] = doc
}

// aggregatedDiscovery reads the aggregated discovery document of path ("/api" or "/apis");
// ok is false when the server answered with the legacy document instead.
func (c *Client) aggregatedDiscovery(ctx context.Context, path string) (list *apidiscoveryv2.APIGroupDiscoveryList, ok bool, err error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	cached := c.discovery.get(path)
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: path, accept: acceptDiscovery, ifNoneMatch: cached.etag})
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, false, err
	}
	switch {
	case resp.StatusCode == http.StatusNotModified && cached.list != nil:
		return cached.list, true, nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, false, errorFromResponse(resp, data)
	}
	mt, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != mimeJSON || params["g"] != apidiscoveryv2.SchemeGroupVersion.Group ||
		params["v"] != apidiscoveryv2.SchemeGroupVersion.Version || params["as"] != "APIGroupDiscoveryList" {
		return nil, false, nil
	}
	list = &apidiscoveryv2.APIGroupDiscoveryList{}
	if err := json.Unmarshal(data, list); err != nil {
		return nil, false, fmt.Errorf("client: decode %s: %w", path, err)
	}
	if etag := resp.Header.Get("ETag"); etag != "" {
		c.discovery.put(path, cachedDiscovery{etag: etag, list: list})
	}
	return list, true, nil
}

// ServerResources returns the resource lists of discovery: /api/v1 first, then the preferred
// version of every group under /apis, in the server's order. It reads the aggregated
// discovery documents (two requests, or two 304s when nothing changed) and falls back to the
// legacy ones (a request per group) on a server without them.
func (c *Client) ServerResources(ctx context.Context) ([]*metav1.APIResourceList, error) {
	var out []*metav1.APIResourceList
	for _, path := range []string{"/api", "/apis"} {
		list, ok, err := c.aggregatedDiscovery(ctx, path)
		if err != nil {
			return nil, err
		}
		if !ok {
			return c.legacyServerResources(ctx)
		}
		for _, g := range list.Items {
			if len(g.Versions) == 0 {
				continue
			}
			// Versions come in preference order.
			gv := schema.GroupVersion{Group: g.Name, Version: g.Versions[0].Version}
			out = append(out, resourceList(gv, g.Versions[0].Resources))
		}
	}
	return out, nil
}

// resourceList is the legacy form of one group version's aggregated entries: each resource,
// then its subresources as "<resource>/<subresource>".
func resourceList(gv schema.GroupVersion, resources []apidiscoveryv2.APIResourceDiscovery) *metav1.APIResourceList {
	list := &metav1.APIResourceList{GroupVersion: gv.String()}
	kind := func(k *metav1.GroupVersionKind) (group, version, kind string) {
		switch {
		case k == nil:
			return "", "", ""
		case k.Group == gv.Group && k.Version == gv.Version:
			return "", "", k.Kind // the legacy form names only other group versions
		}
		return k.Group, k.Version, k.Kind
	}
	for _, r := range resources {
		namespaced := r.Scope == apidiscoveryv2.ScopeNamespace
		g, v, k := kind(r.ResponseKind)
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r.Resource, SingularName: r.SingularResource,
			Namespaced: namespaced, Group: g, Version: v, Kind: k, Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories})
		for _, sub := range r.Subresources {
			g, v, k := kind(sub.ResponseKind)
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r.Resource + "/" + sub.Subresource,
				Namespaced: namespaced, Group: g, Version: v, Kind: k, Verbs: sub.Verbs})
		}
	}
	return list
}

// legacyServerResources is ServerResources from the legacy documents: /api/v1, /apis, then
// each group's preferred version.
func (c *Client) legacyServerResources(ctx context.Context) ([]*metav1.APIResourceList, error) {
	get := func(path string, into any) error {
		data, err := c.Raw(ctx, http.MethodGet, path, nil, nil)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, into); err != nil {
			return fmt.Errorf("client: decode %s: %w", path, err)
		}
		return nil
	}
	core := &metav1.APIResourceList{}
	if err := get("/api/v1", core); err != nil {
		return nil, err
	}
	if core.GroupVersion == "" {
		core.GroupVersion = "v1"
	}
	out := []*metav1.APIResourceList{core}
	var groups metav1.APIGroupList
	if err := get("/apis", &groups); err != nil {
		return nil, err
	}
	for _, g := range groups.Groups {
		gv := g.PreferredVersion.GroupVersion
		if gv == "" && len(g.Versions) > 0 {
			gv = g.Versions[0].GroupVersion
		}
		if gv == "" {
			continue
		}
		list := &metav1.APIResourceList{}
		if err := get("/apis/"+gv, list); err != nil {
			return nil, err
		}
		if list.GroupVersion == "" {
			list.GroupVersion = gv
		}
		out = append(out, list)
	}
	return out, nil
}

// APIResource is one resource (not a subresource) discovery lists, at the version it was
// listed at.
type APIResource struct {
	schema.GroupVersionResource
	Kind       string
	Namespaced bool
	Verbs      []string
}

// GroupVersionKind is the kind of the resource's objects.
func (r APIResource) GroupVersionKind() schema.GroupVersionKind {
	return r.GroupVersionResource.GroupVersion().WithKind(r.Kind)
}

// FilterResources returns the resources of lists (subresources left out) that support every
// one of verbs, in the lists' order.
func FilterResources(lists []*metav1.APIResourceList, verbs ...string) []APIResource {
	var out []APIResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !containsAll(r.Verbs, verbs) {
				continue
			}
			out = append(out, APIResource{GroupVersionResource: gv.WithResource(r.Name), Kind: r.Kind, Namespaced: r.Namespaced, Verbs: r.Verbs})
		}
	}
	return out
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
