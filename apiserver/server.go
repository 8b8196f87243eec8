// Package apiserver serves the Kubernetes API over HTTP from the resources in registry, stored in
// etcd through storage: discovery, OpenAPI, the REST verbs, watch streams, tables and errors as
// metav1.Status. Discovery serves the legacy documents and, to clients that ask for it, the
// aggregated apidiscovery.k8s.io/v2 ones (with ETags), all from one snapshot of the served
// resources that discoveryChanged invalidates (discovery.go). Requests are authenticated first (package authentication: the token file,
// service-account tokens); identity.go serves the TokenRequest, TokenReview and
// SelfSubjectReview APIs and runs the ServiceAccount admission of new pods (package
// serviceaccount); authorization.go answers the access reviews (there is no authorizer yet:
// everything is allowed). Writes go through admission in Kubernetes' order: the built-in
// plugins, the mutating admission policies and webhooks, validation, the validating policies
// and webhooks, then ResourceQuota (webhookadmission.go, policyadmission.go, quota.go; the
// decisions are package admission's); exec, attach and portforward are admitted as CONNECT
// (connectadmission.go), and ValidatingAdmissionPolicies get their status.typeChecking from a
// loop of the server's own (policystatus.go). A plain-HTTP loopback server answers TLS on the
// same port too (listener.go), for in-cluster clients that reach it through the kubernetes
// service (bootstrap.go). The pods' log, exec, attach and portforward subresources are passed
// on to the node agent running the pod (log.go, stream.go).
package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/apiserver/admission"
	"github.com/kplane/kplane/apiserver/authentication"
	"github.com/kplane/kplane/apiserver/customresource"
	"github.com/kplane/kplane/apiserver/fieldmanager"
	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/apiserver/serviceaccount"
	"github.com/kplane/kplane/internal/profiling"
	"github.com/kplane/kplane/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Config is what a Server needs.
type Config struct {
	Etcd              *storage.Etcd
	ServiceAllocation *registry.ServiceAllocation
	Cache             storage.CacheOptions
	// StaticTokens are the users of --token-auth-file; when set, every request must
	// authenticate (otherwise requests without credentials are served as system:anonymous).
	StaticTokens *authentication.StaticTokens
	// ServiceAccounts issues and accepts service-account tokens; nil does neither.
	ServiceAccounts *ServiceAccountConfig
	// ExternalAddress is host:port clients use to reach this server (discovery and the
	// kubernetes service's endpoints).
	ExternalAddress string
	// Profiling serves Go's profiles at /debug/pprof (kube-apiserver's --profiling), to
	// authenticated clients.
	Profiling bool
}

// resource is one served resource: its definition and its store.
type resource struct {
	strategy registry.Strategy
	info     *registry.Info
	store    objectStore
	// conv converts the objects of a resource served at a version other than the stored one
	// (nil for the stored version's).
	conv   storage.Converter
	claims storage.ClaimsFunc
	// selectable are the field names field selectors may use.
	selectable fields.Set
	// custom is the strategy of a custom resource (nil for built-in ones); terminating is
	// set while its CRD's objects are being deleted.
	custom      *customresource.Resource
	terminating *atomic.Bool
	// fields record field ownership, one manager per endpoint: "" (the object), "status",
	// "scale", "finalize" (fields.go).
	fields map[string]*fieldmanager.Manager
}

// Server is the API server's HTTP handler.
type Server struct {
	cfg       Config
	resources map[schema.GroupVersionResource]*resource
	ordered   []*resource
	// custom are the resources CRDs add while the server runs (crd.go).
	custom  customResources
	ready   atomic.Bool
	openapi openAPICache
	// recentlyTerminated holds namespaces this server moved to Terminating in the last
	// minute (name → time); creates in them look the namespace up in etcd, because the
	// watch cache may not have seen the deletion yet.
	terminatingMu      sync.Mutex
	recentlyTerminated map[string]time.Time
	// authn checks bearer tokens; tokens answers TokenRequests (nil: not served).
	authn  authentication.Union
	tokens *serviceaccount.Issuer
	// metrics scrapes the nodes for metrics.k8s.io (metrics.go).
	metrics *metricsSampler
	// streams are the connections of exec, attach and port-forward sessions (stream.go).
	streams streamConns
	// discovery is the snapshot every discovery document is served from; nil after
	// discoveryChanged until the next discovery request builds it again (discovery.go).
	discoveryMu sync.Mutex
	discovery   *discoverySnapshot
	// webhooks are the prepared admission webhooks and policies (webhookadmission.go,
	// policyadmission.go).
	webhooks struct {
		validating, mutating prepared[admission.Hooks]
		policies             prepared[admission.Policies]
		mutatingPolicies     prepared[admission.MutatingPolicies]
	}
}

// New builds the server's resources and stores; Run starts them.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, resources: map[schema.GroupVersionResource]*resource{}, recentlyTerminated: map[string]time.Time{},
		metrics: newMetricsSampler(),
		custom:  customResources{byGVR: map[schema.GroupVersionResource]*resource{}, byCRD: map[string]*servedCRD{}}}
	// The stores of stored versions first: a resource served at a second version reads and
	// writes through the store of the resource whose keys hold its objects.
	all := append(registry.All(cfg.ServiceAllocation), customresource.CRDs)
	stores := map[schema.GroupResource]*storage.Store{}
	for _, st := range all {
		if st.StoredVersion() != nil {
			continue
		}
		info := st.Describe()
		stores[info.GroupResource()] = storage.NewStore(cfg.Etcd, StorageCodec{}, storeConfig(st), cfg.Cache)
	}
	for _, st := range all {
		info := st.Describe()
		r := &resource{strategy: st, info: info, claims: func(o storage.Object) []string { return st.ClaimsOf(o) },
			selectable: st.SelectableFields(st.NewObject())}
		keys := info.GroupResource()
		if info.StoredUnder != (schema.GroupResource{}) {
			keys = info.StoredUnder
		}
		if cv := st.StoredVersion(); cv != nil {
			r.conv = registryConverter{cv}
			r.store = storage.NewConverted(stores[keys], storeConfig(st), r.conv)
		} else {
			r.store = stores[keys]
		}
		r.fields = fieldManagers(r)
		s.resources[info.GroupVersion.WithResource(info.Resource)] = r
		s.ordered = append(s.ordered, r)
	}
	if cfg.StaticTokens != nil {
		s.authn = append(s.authn, cfg.StaticTokens)
	}
	if sa := cfg.ServiceAccounts; sa != nil {
		s.authn = append(s.authn, serviceaccount.NewAuthenticator(sa.Issuers, sa.Keys, sa.APIAudiences, storeObjects{s: s, cached: true}))
		s.tokens = serviceaccount.NewIssuer(sa.Signer, sa.APIAudiences)
	}
	return s
}

func storeConfig(st registry.Strategy) storage.ResourceConfig {
	info := st.Describe()
	return storage.ResourceConfig{
		GroupResource: info.GroupResource(),
		Kind:          info.GVK(),
		New:           func() storage.Object { return st.NewObject() },
		NewList:       st.NewListObject,
		Attrs: func(o storage.Object) (labels.Set, fields.Set) {
			return labels.Set(o.GetLabels()), st.SelectableFields(o)
		},
	}
}

// Run starts every watch cache, creates the default namespaces and the kubernetes service, and
// marks the server ready. It blocks until ctx is cancelled.
func (s *Server) Run(ctx context.Context) error {
	// Whatever ends Run (ctx, or a failure to start) ends the watch caches too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.streams.closeAll()
	var wg sync.WaitGroup
	for _, r := range s.ordered {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.store.Run(ctx)
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, r := range s.ordered {
		if err := r.store.WaitReady(ctx); err != nil {
			return err
		}
	}
	if err := s.bootstrap(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := s.runCRDs(ctx, &wg); err != nil {
		return fmt.Errorf("custom resources: %w", err)
	}
	s.runPolicyStatus(ctx, &wg)
	s.ready.Store(true)
	<-ctx.Done()
	return nil
}

// Ready reports whether Run has finished starting up.
func (s *Server) Ready() bool { return s.ready.Load() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			slog.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			writeError(w, apierrors.NewInternalError(fmt.Errorf("internal error")))
		}
	}()
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/healthz", "/livez":
		writeText(w, http.StatusOK, "ok")
		return
	case "/readyz":
		if !s.Ready() {
			writeText(w, http.StatusServiceUnavailable, "not ready: starting")
			return
		}
		writeText(w, http.StatusOK, "ok")
		return
	case "/version":
		writeJSON(w, http.StatusOK, versionInfo())
		return
	}
	r, err := s.authenticate(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if r.ContentLength > maxBodyBytes {
		writeError(w, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxBodyBytes)))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes+1)
	r = withWarnings(r, w)
	switch {
	case path == "" || path == "/":
		writeJSON(w, http.StatusOK, map[string]any{"paths": s.discoveryDocs().paths})
	case path == "/api" || path == "/apis":
		s.serveDiscovery(w, r, path)
	case strings.HasPrefix(path, "/openapi/"):
		s.serveOpenAPI(w, r, path)
	case s.cfg.Profiling && strings.HasPrefix(r.URL.Path, "/debug/pprof"):
		profiling.Handler.ServeHTTP(w, r)
	case strings.HasPrefix(path, "/api/"):
		s.serveAPI(w, r, "", strings.Split(strings.TrimPrefix(path, "/api/"), "/"))
	case strings.HasPrefix(path, "/apis/"):
		parts := strings.Split(strings.TrimPrefix(path, "/apis/"), "/")
		if len(parts) == 1 {
			s.serveDiscovery(w, r, path)
			return
		}
		s.serveAPI(w, r, parts[0], parts[1:])
	default:
		writeError(w, apierrors.NewNotFound(schema.GroupResource{}, path))
	}
}

// request is a parsed resource request.
type request struct {
	res         *resource
	namespace   string
	name        string
	subresource string
	writer      writer
}

// serveAPI routes /api/<version>/... and /apis/<group>/<version>/...
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, group string, parts []string) {
	r = withDryRun(r)
	gv := schema.GroupVersion{Group: group, Version: parts[0]}
	parts = parts[1:]
	if len(parts) == 0 {
		path := "/apis/" + gv.String()
		if group == "" {
			path = "/api/" + gv.Version
		}
		s.serveDiscovery(w, r, path)
		return
	}
	watchPath := false
	if parts[0] == "watch" {
		// The deprecated /watch/ path prefix.
		watchPath, parts = true, parts[1:]
	}
	req := request{}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		req.namespace = parts[1]
		// /namespaces/<name>/status and /finalize address the namespace itself.
		if len(parts) > 2 && parts[2] != "status" && parts[2] != "finalize" {
			parts = parts[2:]
		} else {
			req.namespace = ""
			parts = append([]string{"namespaces"}, parts[1:]...)
		}
	}
	if len(parts) == 0 || len(parts) > 3 {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	if gv == metricsGV {
		s.serveMetrics(w, r, req.namespace, parts, watchPath || isTrue(r.URL.Query().Get("watch")))
		return
	}
	res, ok := s.lookupResource(gv.WithResource(parts[0]))
	if !ok {
		if gv.Group == "" && parts[0] == "bindings" && r.Method == http.MethodPost && req.namespace != "" {
			s.createBinding(w, r, req.namespace, "")
			return
		}
		if gv.Group == "" && parts[0] == "componentstatuses" && req.namespace == "" {
			s.serveComponentStatuses(w, r, parts, watchPath || isTrue(r.URL.Query().Get("watch")))
			return
		}
		if gv == authenticationV1 && len(parts) == 1 && req.namespace == "" {
			s.serveIdentityAPI(w, r, parts[0])
			return
		}
		if gv == authorizationV1 && len(parts) == 1 {
			s.serveAuthorizationAPI(w, r, req.namespace, parts[0])
			return
		}
		writeError(w, apierrors.NewGenericServerResponse(http.StatusNotFound, strings.ToLower(r.Method), schema.GroupResource{Group: gv.Group, Resource: parts[0]}, "", "", 0, false))
		return
	}
	req.res = res
	req.writer.manager = managerOf(r)
	if len(parts) > 1 {
		req.name = parts[1]
	}
	if len(parts) > 2 {
		req.subresource = parts[2]
	}
	if res.info.Namespaced && req.name == "" && req.namespace == "" && r.Method != http.MethodGet {
		writeError(w, apierrors.NewBadRequest("the namespace of the request is required for this resource"))
		return
	}
	if !res.info.Namespaced && req.namespace != "" && !(res.info.Resource == "namespaces") {
		writeError(w, apierrors.NewNotFound(res.info.GroupResource(), req.name))
		return
	}
	isWatch := watchPath || isTrue(r.URL.Query().Get("watch"))
	s.serveResource(w, r, req, isWatch)
}

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, req request, isWatch bool) {
	gr := req.res.info.GroupResource()
	unsupported := func(verb string) { writeError(w, apierrors.NewMethodNotSupported(gr, verb)) }
	if req.subresource != "" {
		s.serveSubresource(w, r, req)
		return
	}
	if req.name == "" {
		switch r.Method {
		case http.MethodGet:
			if isWatch {
				s.watch(w, r, req)
			} else {
				s.list(w, r, req)
			}
		case http.MethodPost:
			s.create(w, r, req)
		case http.MethodDelete:
			if req.res.info.Resource == "namespaces" {
				unsupported("deletecollection")
				return
			}
			s.deleteCollection(w, r, req)
		default:
			unsupported(strings.ToLower(r.Method))
		}
		return
	}
	switch r.Method {
	case http.MethodGet:
		if isWatch {
			// Watching one object is a watch with a name field selector.
			q := r.URL.Query()
			sel := "metadata.name=" + req.name
			if fs := q.Get("fieldSelector"); fs != "" {
				sel += "," + fs
			}
			q.Set("fieldSelector", sel)
			r.URL.RawQuery = q.Encode()
			req.name = ""
			s.watch(w, r, req)
			return
		}
		s.get(w, r, req)
	case http.MethodPut:
		s.update(w, r, req)
	case http.MethodPatch:
		s.patch(w, r, req)
	case http.MethodDelete:
		s.delete(w, r, req)
	default:
		unsupported(strings.ToLower(r.Method))
	}
}

func (s *Server) serveSubresource(w http.ResponseWriter, r *http.Request, req request) {
	info := req.res.info
	gr := info.GroupResource()
	switch {
	case req.subresource == "status" && info.Status, req.subresource == "approval" && info.Approval:
		switch r.Method {
		case http.MethodGet:
			s.get(w, r, req)
		case http.MethodPut:
			s.update(w, r, req)
		case http.MethodPatch:
			s.patch(w, r, req)
		default:
			writeError(w, apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method)))
		}
	case req.subresource == "finalize" && info.Resource == "namespaces" && r.Method == http.MethodPut:
		s.update(w, r, req)
	case req.subresource == "scale" && info.Scale:
		s.serveScale(w, r, req)
	case req.subresource == "binding" && info.Binding && r.Method == http.MethodPost:
		s.createBinding(w, r, req.namespace, req.name)
	case req.subresource == "eviction" && isCorePods(info):
		s.serveEviction(w, r, req)
	case req.subresource == "log" && isCorePods(info):
		s.serveLog(w, r, req)
	case req.subresource == "token" && isCoreServiceAccounts(info) && s.tokens != nil:
		s.serveTokenRequest(w, r, req)
	case isStreamSubresource(req.subresource) && isCorePods(info):
		s.serveStream(w, r, req)
	default:
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Group: gr.Group, Resource: gr.Resource + "/" + req.subresource}, req.name))
	}
}

func isTrue(v string) bool { return v == "true" || v == "1" }

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text))
}
