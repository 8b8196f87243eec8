package apiserver

import (
	"encoding/json"
	"net/http"
	"runtime"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
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

// groupVersions lists the served group versions, core first, then groups by name; a group
// served at several versions has them in registry order, its preferred one first.
func (s *Server) groupVersions() []schema.GroupVersion {
	seen := map[schema.GroupVersion]bool{}
	var out []schema.GroupVersion
	for _, r := range s.ordered {
		if gv := r.info.GroupVersion; !seen[gv] {
			seen[gv] = true
			out = append(out, gv)
		}
	}
	// authentication.k8s.io and authorization.k8s.io have only reviews, which are answered,
	// not stored.
	out = append(out, authenticationV1, authorizationV1)
	out = append(out, metricsGV) // served without storage (metrics.go)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// groups lists the served API groups (not the core one) in groupVersions' order, each with
// its versions.
func (s *Server) groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	for _, gv := range s.groupVersions() {
		if gv.Group == "" {
			continue
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		if n := len(out); n > 0 && out[n-1].Name == gv.Group {
			out[n-1].Versions = append(out[n-1].Versions, v)
			continue
		}
		out = append(out, metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
	}
	return out
}

func (s *Server) rootPaths() []string {
	paths := []string{"/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"}
	for _, g := range s.groups() {
		paths = append(paths, "/apis/"+g.Name)
		for _, v := range g.Versions {
			paths = append(paths, "/apis/"+v.GroupVersion)
		}
	}
	sort.Strings(paths)
	return paths
}

func (s *Server) serveAPIVersions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: s.serverAddress(r)},
		},
	})
}

func (s *Server) serverAddress(r *http.Request) string {
	if s.cfg.ExternalAddress != "" {
		return s.cfg.ExternalAddress
	}
	return r.Host
}

func (s *Server) serveAPIGroupList(w http.ResponseWriter) {
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	list.Groups = append(list.Groups, s.groups()...)
	writeJSON(w, http.StatusOK, &list)
}

func (s *Server) serveAPIGroup(w http.ResponseWriter, group string) {
	for _, g := range s.groups() {
		if g.Name == group {
			g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
			writeJSON(w, http.StatusOK, &g)
			return
		}
	}
	writeError(w, apierrors.NewNotFound(schema.GroupResource{}, group))
}

var (
	allVerbs    = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	statusVerbs = metav1.Verbs{"get", "patch", "update"}
)

func (s *Server) serveResourceList(w http.ResponseWriter, gv schema.GroupVersion) {
	if gv == metricsGV {
		serveMetricsResourceList(w)
		return
	}
	list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, r := range s.ordered {
		info := r.info
		if info.GroupVersion != gv {
			continue
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: info.Resource, SingularName: info.Singular, Namespaced: info.Namespaced, Kind: info.Kind,
			Verbs: allVerbs, ShortNames: info.ShortNames, Categories: info.Categories,
		})
		sub := func(name, group, version, kind string, verbs metav1.Verbs) {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: info.Resource + "/" + name, Namespaced: info.Namespaced, Group: group, Version: version, Kind: kind, Verbs: verbs,
			})
		}
		if info.Binding {
			sub("binding", "", "", "Binding", metav1.Verbs{"create"})
		}
		if isCorePods(info) {
			connect := metav1.Verbs{"create", "get"}
			sub("attach", "", "", "PodAttachOptions", connect)
			sub("exec", "", "", "PodExecOptions", connect)
			sub("eviction", "policy", "v1", "Eviction", metav1.Verbs{"create"})
			sub("log", "", "", "Pod", metav1.Verbs{"get"})
			sub("portforward", "", "", "PodPortForwardOptions", connect)
		}
		if isCoreServiceAccounts(info) && s.tokens != nil {
			sub("token", authenticationV1.Group, authenticationV1.Version, "TokenRequest", metav1.Verbs{"create"})
		}
		if info.Resource == "namespaces" {
			sub("finalize", "", "", "Namespace", metav1.Verbs{"update"})
		}
		if info.Scale {
			sub("scale", "autoscaling", "v1", "Scale", statusVerbs)
		}
		if info.Status {
			sub("status", "", "", info.Kind, statusVerbs)
		}
		if info.Approval {
			sub("approval", "", "", info.Kind, statusVerbs)
		}
	}
	if gv == authenticationV1 {
		list.APIResources = append(list.APIResources, identityAPIResources...)
	}
	if gv == authorizationV1 {
		list.APIResources = append(list.APIResources, authorizationAPIResources...)
	}
	if len(list.APIResources) == 0 {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{}, gv.String()))
		return
	}
	if gv.Group == "" {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: "bindings", Namespaced: true, Kind: "Binding", Verbs: metav1.Verbs{"create"}})
	}
	sort.Slice(list.APIResources, func(i, j int) bool { return list.APIResources[i].Name < list.APIResources[j].Name })
	writeJSON(w, http.StatusOK, &list)
}
