package apiserver

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/kplane/kplane/apiserver/registry"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// KubernetesVersion is the Kubernetes release whose API kplane serves.
const KubernetesVersion = "v1.36.0"

// Version is kplane's own version, set at build time with -ldflags.
var Version = "dev"

func versionInfo() version.Info {
	return version.Info{
		Major: "1", Minor: "36", GitVersion: KubernetesVersion + "+kplane-" + Version,
		GoVersion: goruntime.Version(), Compiler: goruntime.Compiler, Platform: goruntime.GOOS + "/" + goruntime.GOARCH,
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", mimeJSON)
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// groupVersions lists the served group versions, core first, then the built-in groups by
// name, then the groups only custom resources are in by name (as kube-apiserver lists them
// after its own, so that kubectl resolves a name both have to the built-in resource); a group
// served at several versions has them in servedResources' order, its preferred one first.
func (s *Server) groupVersions() []schema.GroupVersion {
	return groupVersionsOf(s.servedResources())
}

func groupVersionsOf(served []*resource) []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	builtIn := map[string]bool{authenticationV1.Group: true, authorizationV1.Group: true, metricsGV.Group: true}
	var out []schema.GroupVersion
	for _, r := range served {
		gv := r.info.GroupVersion
		if r.custom == nil {
			builtIn[gv.Group] = true
		}
		if !seen[gv] {
			seen[gv] = true
			out = append(out, gv)
		}
	}
	// authentication.k8s.io and authorization.k8s.io have only reviews, which are answered,
	// not stored.
	out = append(out, authenticationV1, authorizationV1)
	out = append(out, metricsGV) // served without storage (metrics.go)
	sort.SliceStable(out, func(i, j int) bool {
		if bi, bj := builtIn[out[i].Group], builtIn[out[j].Group]; bi != bj {
			return bi
		}
		return out[i].Group < out[j].Group
	})
	return out
}

// The discovery documents (/api, /apis, /apis/<group>, /apis/<group>/<version>, both the legacy
// ones and the aggregated apidiscovery.k8s.io/v2 ones) are all derived from one snapshot of
// the served resources, built by discoveredGroupVersions on first use and kept until
// discoveryChanged drops it. Whatever changes the set of served resources at run time calls
// discoveryChanged; the next discovery request builds a new snapshot, with a new ETag.

// discoverySnapshot is every discovery document as of one state of the served resources.
type discoverySnapshot struct {
	// groups are the legacy /apis groups (not the core one), in served order.
	groups []metav1.APIGroup
	// resources are the legacy resource lists by group version.
	resources map[schema.GroupVersion]*metav1.APIResourceList
	// core and named are the aggregated documents of /api and /apis.
	core, named aggregatedDocument
	// paths are the root document's paths.
	paths []string
}

// aggregatedDocument is one APIGroupDiscoveryList, encoded once in each form it is served in.
type aggregatedDocument struct {
	list     *apidiscoveryv2.APIGroupDiscoveryList
	json     []byte
	protobuf []byte
	etag     string // quoted, as the header carries it
}

// discoveryChanged drops the discovery snapshot: the set of served resources (or what
// discovery says about them) has changed. The next discovery request builds a new one.
func (s *Server) discoveryChanged() {
	s.discoveryMu.Lock()
	defer s.discoveryMu.Unlock()
	s.discovery = nil
}

// discoveryDocs returns the current snapshot, building it if discoveryChanged dropped it.
func (s *Server) discoveryDocs() *discoverySnapshot {
	s.discoveryMu.Lock()
	defer s.discoveryMu.Unlock()
	if s.discovery == nil {
		s.discovery = newDiscoverySnapshot(s.discoveredGroupVersions())
	}
	return s.discovery
}

// discoveredGroupVersion is one served group version with its resources, as aggregated
// discovery describes them (subresources inside their resource).
type discoveredGroupVersion struct {
	gv        schema.GroupVersion
	resources []apidiscoveryv2.APIResourceDiscovery
}

var (
	allVerbs    = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	statusVerbs = []string{"get", "patch", "update"}
	// namespaceVerbs are allVerbs but deletecollection, as kube-apiserver serves them.
	namespaceVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
)

// discoveredGroupVersions is the one description of everything served that every discovery
// document is derived from: the group versions in groupVersions' order (core first, a group's
// preferred version first), each with its resources sorted by name.
func (s *Server) discoveredGroupVersions() []discoveredGroupVersion {
	var out []discoveredGroupVersion
	served := s.servedResources()
	for _, gv := range groupVersionsOf(served) {
		d := discoveredGroupVersion{gv: gv}
		for _, r := range served {
			switch {
			case r.info.GroupVersion != gv:
			case r.custom != nil:
				d.resources = append(d.resources, describeCustomResource(r.info))
			default:
				d.resources = append(d.resources, s.describeResource(r.info))
			}
		}
		switch gv {
		case schema.GroupVersion{Version: "v1"}:
			d.resources = append(d.resources, apidiscoveryv2.APIResourceDiscovery{Resource: "bindings", SingularResource: "binding",
				ResponseKind: &metav1.GroupVersionKind{Kind: "Binding"}, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"create"}})
			cs := registry.ComponentStatuses.Info
			d.resources = append(d.resources, apidiscoveryv2.APIResourceDiscovery{Resource: cs.Resource, SingularResource: cs.Singular,
				ResponseKind: &metav1.GroupVersionKind{Kind: cs.Kind}, Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get", "list"}, ShortNames: cs.ShortNames})
		case authorizationV1:
			d.resources = append(d.resources, discoveredResources(authorizationAPIResources)...)
		case authenticationV1:
			d.resources = append(d.resources, discoveredResources(identityAPIResources)...)
		case metricsGV:
			d.resources = append(d.resources, discoveredResources(metricsResources)...)
		}
		if len(d.resources) == 0 {
			continue
		}
		sort.Slice(d.resources, func(i, j int) bool { return d.resources[i].Resource < d.resources[j].Resource })
		out = append(out, d)
	}
	return out
}

// describeResource is the aggregated discovery entry of a stored resource.
func (s *Server) describeResource(info *registry.Info) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if info.Namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	verbs := allVerbs
	if info.Resource == "namespaces" && info.GroupVersion.Group == "" {
		verbs = namespaceVerbs // namespaces are not deleted as a collection
	}
	d := apidiscoveryv2.APIResourceDiscovery{
		Resource: info.Resource, SingularResource: info.Singular, Scope: scope,
		ResponseKind: &metav1.GroupVersionKind{Kind: info.Kind},
		Verbs:        verbs, ShortNames: info.ShortNames, Categories: info.Categories,
	}
	sub := func(name string, kind metav1.GroupVersionKind, verbs ...string) {
		d.Subresources = append(d.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: name, ResponseKind: &kind, Verbs: verbs})
	}
	if info.Binding {
		sub("binding", metav1.GroupVersionKind{Kind: "Binding"}, "create")
	}
	if isCorePods(info) {
		sub("attach", metav1.GroupVersionKind{Kind: "PodAttachOptions"}, "create", "get")
		sub("eviction", metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, "create")
		sub("exec", metav1.GroupVersionKind{Kind: "PodExecOptions"}, "create", "get")
		sub("log", metav1.GroupVersionKind{Kind: "Pod"}, "get")
		sub("portforward", metav1.GroupVersionKind{Kind: "PodPortForwardOptions"}, "create", "get")
	}
	if isCoreServiceAccounts(info) && s.tokens != nil {
		sub("token", metav1.GroupVersionKind{Group: authenticationV1.Group, Version: authenticationV1.Version, Kind: "TokenRequest"}, "create")
	}
	if info.Resource == "namespaces" && info.GroupVersion.Group == "" {
		sub("finalize", metav1.GroupVersionKind{Kind: info.Kind}, "update")
	}
	if info.Scale {
		sub("scale", metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, statusVerbs...)
	}
	if info.Status {
		sub("status", metav1.GroupVersionKind{Kind: info.Kind}, statusVerbs...)
	}
	if info.Approval {
		sub("approval", metav1.GroupVersionKind{Kind: info.Kind}, statusVerbs...)
	}
	sort.Slice(d.Subresources, func(i, j int) bool { return d.Subresources[i].Subresource < d.Subresources[j].Subresource })
	return d
}

// customVerbs are a custom resource's verbs in the order kube-apiserver lists them.
var customVerbs = []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}

// describeCustomResource is the aggregated discovery entry of a custom resource, as
// kube-apiserver writes those: the kind with its group and version, status before scale.
func describeCustomResource(info *registry.Info) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if info.Namespaced {
		scope = apidiscoveryv2.ScopeNamespace
	}
	own := metav1.GroupVersionKind{Group: info.GroupVersion.Group, Version: info.GroupVersion.Version, Kind: info.Kind}
	d := apidiscoveryv2.APIResourceDiscovery{
		Resource: info.Resource, SingularResource: info.Singular, Scope: scope, ResponseKind: &own,
		Verbs: customVerbs, ShortNames: info.ShortNames, Categories: info.Categories,
	}
	if info.Status {
		d.Subresources = append(d.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "status", ResponseKind: &own, Verbs: statusVerbs})
	}
	if info.Scale {
		d.Subresources = append(d.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "scale",
			ResponseKind: &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, Verbs: statusVerbs})
	}
	return d
}

// discoveredResources turns resources described the legacy way (no subresources) into
// aggregated entries.
func discoveredResources(in []metav1.APIResource) []apidiscoveryv2.APIResourceDiscovery {
	out := make([]apidiscoveryv2.APIResourceDiscovery, len(in))
	for i, r := range in {
		scope := apidiscoveryv2.ScopeCluster
		if r.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		out[i] = apidiscoveryv2.APIResourceDiscovery{Resource: r.Name, SingularResource: r.SingularName, Scope: scope,
			ResponseKind: &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
			Verbs:        r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories}
	}
	return out
}

// legacyResources is the legacy resource list of one group version: each resource, then each
// of its subresources as "<resource>/<subresource>"; a kind names its group and version only
// when they are not the list's.
func legacyResources(d discoveredGroupVersion) *metav1.APIResourceList {
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: d.gv.String()}
	kind := func(k *metav1.GroupVersionKind) (group, version, kind string) {
		if k.Group == d.gv.Group && k.Version == d.gv.Version {
			return "", "", k.Kind
		}
		return k.Group, k.Version, k.Kind
	}
	for _, r := range d.resources {
		namespaced := r.Scope == apidiscoveryv2.ScopeNamespace
		g, v, k := kind(r.ResponseKind)
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: r.Resource, SingularName: r.SingularResource, Namespaced: namespaced, Group: g, Version: v, Kind: k,
			Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories,
		})
		for _, sub := range r.Subresources {
			g, v, k := kind(sub.ResponseKind)
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: r.Resource + "/" + sub.Subresource, Namespaced: namespaced, Group: g, Version: v, Kind: k, Verbs: sub.Verbs,
			})
		}
	}
	return list
}

// newDiscoverySnapshot derives every discovery document from the served group versions.
func newDiscoverySnapshot(served []discoveredGroupVersion) *discoverySnapshot {
	snap := &discoverySnapshot{resources: map[schema.GroupVersion]*metav1.APIResourceList{}}
	core := &apidiscoveryv2.APIGroupDiscoveryList{}
	named := &apidiscoveryv2.APIGroupDiscoveryList{}
	snap.paths = []string{"/api", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"}
	for _, d := range served {
		snap.resources[d.gv] = legacyResources(d)
		version := apidiscoveryv2.APIVersionDiscovery{Version: d.gv.Version, Resources: d.resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		if d.gv.Group == "" {
			snap.paths = append(snap.paths, "/api/"+d.gv.Version)
			if len(core.Items) == 0 {
				core.Items = append(core.Items, apidiscoveryv2.APIGroupDiscovery{})
			}
			core.Items[0].Versions = append(core.Items[0].Versions, version)
			continue
		}
		snap.paths = append(snap.paths, "/apis/"+d.gv.String())
		v := metav1.GroupVersionForDiscovery{GroupVersion: d.gv.String(), Version: d.gv.Version}
		if n := len(snap.groups); n > 0 && snap.groups[n-1].Name == d.gv.Group {
			snap.groups[n-1].Versions = append(snap.groups[n-1].Versions, v)
			named.Items[n-1].Versions = append(named.Items[n-1].Versions, version)
			continue
		}
		snap.paths = append(snap.paths, "/apis/"+d.gv.Group)
		snap.groups = append(snap.groups, metav1.APIGroup{Name: d.gv.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
		named.Items = append(named.Items, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: d.gv.Group}, Versions: []apidiscoveryv2.APIVersionDiscovery{version}})
	}
	sort.Strings(snap.paths)
	snap.core, snap.named = encodeAggregated(core), encodeAggregated(named)
	return snap
}

var aggregatedListKind = apidiscoveryv2.SchemeGroupVersion.WithKind("APIGroupDiscoveryList")

// encodeAggregated encodes list in JSON and protobuf; its ETag is the hash of the JSON form,
// the same whichever form is sent (as kube-apiserver's).
func encodeAggregated(list *apidiscoveryv2.APIGroupDiscoveryList) aggregatedDocument {
	list.SetGroupVersionKind(aggregatedListKind)
	if list.Items == nil {
		list.Items = []apidiscoveryv2.APIGroupDiscovery{}
	}
	doc := aggregatedDocument{list: list}
	var buf bytes.Buffer
	if err := jsonSerializer.Encode(list, &buf); err != nil {
		panic(fmt.Sprintf("encoding discovery: %v", err)) // only our own, well-formed types
	}
	doc.json = bytes.Clone(buf.Bytes())
	buf.Reset()
	if err := protobufSerializer.Encode(list, &buf); err != nil {
		panic(fmt.Sprintf("encoding discovery: %v", err))
	}
	doc.protobuf = bytes.Clone(buf.Bytes())
	sum := sha512.Sum512(doc.json)
	doc.etag = strconv.Quote(strings.ToUpper(hex.EncodeToString(sum[:])))
	return doc
}

// discoveryForm is the form of a discovery document a client asked for.
type discoveryForm struct {
	aggregated bool   // apidiscovery.k8s.io/v2 APIGroupDiscoveryList (only for /api and /apis)
	out        output // the encoding: JSON, YAML or protobuf
}

// aggregatedMediaParams are the parameters naming the aggregated discovery document.
const aggregatedMediaParams = ";g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// negotiateDiscovery picks the first form in the Accept header the server has: the aggregated
// document (JSON or protobuf, where the path has one), or a legacy one (JSON, YAML or
// protobuf). A media type with parameters naming anything else (v2beta1, which Kubernetes
// v1.36 no longer serves, or a Table) is passed over, so a client listing the legacy document
// after it gets that; nothing acceptable is a 406.
func negotiateDiscovery(r *http.Request, aggregatedServed bool) (discoveryForm, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return discoveryForm{out: outputJSON}, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		var out output
		switch mt {
		case mimeJSON, "application/*", "*/*":
			out = outputJSON
		case mimeYAML:
			out = outputYAML
		case mimeProtobuf:
			out = outputProtobuf
		default:
			continue
		}
		g, v, as := params["g"], params["v"], params["as"]
		switch {
		case g == "" && v == "" && as == "":
			return discoveryForm{out: out}, nil
		case aggregatedServed && out != outputYAML && g == apidiscoveryv2.SchemeGroupVersion.Group &&
			v == apidiscoveryv2.SchemeGroupVersion.Version && as == "APIGroupDiscoveryList":
			return discoveryForm{aggregated: true, out: out}, nil
		}
	}
	return discoveryForm{}, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
		"only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf", 0, false)
}

// serveDiscovery answers a discovery path: /api and /apis in the negotiated form, the others
// (legacy only) in the negotiated encoding.
func (s *Server) serveDiscovery(w http.ResponseWriter, r *http.Request, path string) {
	root := path == "/api" || path == "/apis"
	form, err := negotiateDiscovery(r, root)
	if err != nil {
		writeError(w, err)
		return
	}
	snap := s.discoveryDocs()
	if form.aggregated {
		doc := snap.named
		if path == "/api" {
			doc = snap.core
		}
		serveAggregated(w, r, doc, form.out)
		return
	}
	var obj runtime.Object
	switch {
	case path == "/api":
		obj = &metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
				{ClientCIDR: "0.0.0.0/0", ServerAddress: s.serverAddress(r)},
			},
		}
	case path == "/apis":
		obj = &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: append([]metav1.APIGroup{}, snap.groups...)}
	default:
		obj = snap.legacyDocument(path)
	}
	if obj == nil {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{}, strings.TrimPrefix(path, "/")))
		return
	}
	writeObject(w, http.StatusOK, form.out, obj)
}

// legacyDocument is the document of /api/<version>, /apis/<group> or /apis/<group>/<version>,
// or nil if nothing is served there.
func (snap *discoverySnapshot) legacyDocument(path string) runtime.Object {
	var gv schema.GroupVersion
	switch parts := strings.Split(strings.TrimPrefix(path, "/"), "/"); {
	case len(parts) == 2 && parts[0] == "api":
		gv.Version = parts[1]
	case len(parts) == 2 && parts[0] == "apis":
		for _, g := range snap.groups {
			if g.Name == parts[1] {
				g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
				return &g
			}
		}
		return nil
	case len(parts) == 3 && parts[0] == "apis":
		gv = schema.GroupVersion{Group: parts[1], Version: parts[2]}
	default:
		return nil
	}
	if list, ok := snap.resources[gv]; ok {
		return list
	}
	return nil
}

// serveAggregated writes an aggregated document with its ETag, or 304 when the client holds
// it already.
func serveAggregated(w http.ResponseWriter, r *http.Request, doc aggregatedDocument, out output) {
	h := w.Header()
	h.Set("ETag", doc.etag)
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "public")
	if r.Header.Get("If-None-Match") == doc.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body, ct := doc.json, mimeJSON
	if out == outputProtobuf {
		body, ct = doc.protobuf, mimeProtobuf
	}
	h.Set("Content-Type", ct+aggregatedMediaParams)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (s *Server) serverAddress(r *http.Request) string {
	if s.cfg.ExternalAddress != "" {
		return s.cfg.ExternalAddress
	}
	return r.Host
}
