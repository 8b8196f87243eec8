package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kplane/kplane/apiserver/customresource"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
)

var crdsGVR = apiextv1.SchemeGroupVersion.WithResource("customresourcedefinitions")

// customResources are the resources CRDs add at runtime, beside the fixed built-in ones.
type customResources struct {
	mu    sync.RWMutex
	byGVR map[schema.GroupVersionResource]*resource
	byCRD map[string]*servedCRD
}

// servedCRD is what one CRD serves: a resource per served version, each converting the
// objects of one store, whose watch cache runs until stop.
type servedCRD struct {
	uid        types.UID
	generation int64
	names      apiextv1.CustomResourceDefinitionNames
	resources  []*resource
	store      *storage.Store
	converter  *customresource.Converter
	// storageVersion is the resource of the storage version, when it is served.
	storageVersion *resource
	// terminating refuses creates while the CRD's objects are being deleted.
	terminating atomic.Bool
	stop        context.CancelFunc
	stopped     sync.WaitGroup
}

// lookupResource finds a served resource, built-in or custom.
func (s *Server) lookupResource(gvr schema.GroupVersionResource) (*resource, bool) {
	if r, ok := s.resources[gvr]; ok {
		return r, true
	}
	s.custom.mu.RLock()
	defer s.custom.mu.RUnlock()
	r, ok := s.custom.byGVR[gvr]
	return r, ok
}

// resourceOfKind finds the served resource of a kind, built-in or custom, without the sorted
// list servedResources makes (admission asks per request).
func (s *Server) resourceOfKind(gvk schema.GroupVersionKind) (*resource, bool) {
	for _, r := range s.ordered {
		if r.info.GVK() == gvk {
			return r, true
		}
	}
	s.custom.mu.RLock()
	defer s.custom.mu.RUnlock()
	for _, r := range s.custom.byGVR {
		if r.info.GVK() == gvk {
			return r, true
		}
	}
	return nil, false
}

// servedResources lists every served resource: the built-in ones in registry order, then the
// custom ones by group, CRD and version order.
func (s *Server) servedResources() []*resource {
	s.custom.mu.RLock()
	defer s.custom.mu.RUnlock()
	out := make([]*resource, 0, len(s.ordered)+len(s.custom.byGVR))
	out = append(out, s.ordered...)
	names := make([]string, 0, len(s.custom.byCRD))
	for n := range s.custom.byCRD {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		gi, gj := groupOf(names[i]), groupOf(names[j])
		if gi != gj {
			return gi < gj
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		out = append(out, s.custom.byCRD[n].resources...)
	}
	return out
}

func groupOf(crdName string) string {
	_, g, _ := strings.Cut(crdName, ".")
	return g
}

// crCodec stores custom resources as JSON in their storage version, and fills the storage
// version's defaults when it reads them back (objects still in an older version get theirs
// when they are converted).
type crCodec struct{ res *customresource.Resource }

func (c crCodec) Encode(obj runtime.Object) ([]byte, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("storing %T: not a custom resource", obj)
	}
	return u.MarshalJSON()
}

func (c crCodec) Decode(data []byte, into runtime.Object) error {
	u, ok := into.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("reading into %T: not a custom resource", into)
	}
	if err := u.UnmarshalJSON(data); err != nil {
		return err
	}
	if u.GetAPIVersion() == c.res.Describe().GroupVersion.String() {
		c.res.Default(u)
	}
	return nil
}

// crVersion converts a CRD's stored objects to one of its versions and back, filling that
// version's defaults into what it converts.
type crVersion struct {
	conv   *customresource.Converter
	served *customresource.Resource
	stored schema.GroupVersion
}

// Served implements storage.Converter.
func (c crVersion) Served(ctx context.Context, stored []storage.Object) ([]storage.Object, error) {
	in := make([]*unstructured.Unstructured, len(stored))
	for i, o := range stored {
		in[i] = o.(*unstructured.Unstructured)
	}
	conv, err := c.conv.Convert(ctx, in, c.served.Describe().GroupVersion)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := make([]storage.Object, len(conv))
	for i, u := range conv {
		if u != in[i] {
			c.served.Default(u)
		}
		out[i] = u
	}
	return out, nil
}

// Stored implements storage.Converter.
func (c crVersion) Stored(ctx context.Context, obj storage.Object) (storage.Object, error) {
	conv, err := c.conv.Convert(ctx, []*unstructured.Unstructured{obj.(*unstructured.Unstructured)}, c.stored)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return conv[0], nil
}

func crStoreConfig(st *customresource.Resource) storage.ResourceConfig {
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

// newCustomResource builds the served resource of one CRD version, over the CRD's store.
func (s *Server) newCustomResource(st *customresource.Resource, base *storage.Store, conv storage.Converter) *resource {
	info := st.Describe()
	r := &resource{strategy: st, info: info, custom: st,
		selectable: st.SelectableFields(st.NewObject())}
	r.conv = conv
	r.store = storage.NewConverted(base, crStoreConfig(st), conv)
	r.fields = customFieldManagers(r)
	return r
}

// runCRDs keeps the served custom resources in step with the CRDs: it accepts their names,
// serves their versions, marks them Established, and deletes their objects when they go.
// Existing CRDs are served before it returns; the loop runs until ctx ends.
func (s *Server) runCRDs(ctx context.Context, wg *sync.WaitGroup) error {
	crds := s.resources[crdsGVR]
	list, err := crds.store.List(ctx, "", storage.ListOptions{})
	if err != nil {
		return err
	}
	for _, o := range listItems(list) {
		if err := s.syncCRD(ctx, o.GetName()); err != nil {
			slog.Warn("serving custom resources", "crd", o.GetName(), "err", err)
		}
	}
	loop := s.syncLoop(ctx, crds, "serving custom resources", s.syncCRD)
	wg.Go(func() {
		defer s.stopAllCRDs()
		loop()
	})
	return nil
}

// syncLoop returns the loop of a goroutine that runs sync for each object of res named by a
// watch event (and for every one at the start of each watch), until ctx ends. A failed sync is
// tried again a second later (a deleted CRD waiting for its objects to go, a status write that
// conflicted); what names the loop in the log.
func (s *Server) syncLoop(ctx context.Context, res *resource, what string, sync func(context.Context, string) error) func() {
	retry := make(chan string)
	pending := map[string]bool{}
	try := func(name string) {
		err := sync(ctx, name)
		if err == nil || ctx.Err() != nil || pending[name] {
			return
		}
		slog.Info(what+": retrying", "name", name, "err", err)
		pending[name] = true
		time.AfterFunc(time.Second, func() {
			select {
			case retry <- name:
			case <-ctx.Done():
			}
		})
	}
	return func() {
		for ctx.Err() == nil {
			w, err := res.store.Watch(ctx, "", storage.WatchOptions{ResourceVersion: "0"})
			if err != nil {
				_ = sleepCtx(ctx, time.Second)
				continue
			}
			for _, ev := range w.Initial {
				try(ev.Object.GetName())
			}
		events:
			for {
				select {
				case ev, ok := <-w.C:
					if !ok {
						break events
					}
					if ev.Object != nil {
						try(ev.Object.GetName())
					}
				case name := <-retry:
					delete(pending, name)
					try(name)
				case <-ctx.Done():
					break events
				}
			}
			w.Stop()
		}
	}
}

// syncCRD brings one CRD's serving and status up to date.
func (s *Server) syncCRD(ctx context.Context, name string) error {
	crds := s.resources[crdsGVR]
	obj, err := crds.store.Get(ctx, "", name)
	if apierrors.IsNotFound(err) {
		s.stopServing(name)
		return nil
	}
	if err != nil {
		return err
	}
	crd := obj.(*apiextv1.CustomResourceDefinition)
	if crd.DeletionTimestamp != nil {
		return s.finalizeCRD(ctx, crd)
	}
	accepted, namesCond := s.acceptNames(crd)
	want := crd.DeepCopy()
	want.Status.AcceptedNames = accepted
	customresource.SetCondition(want, namesCond)
	if namesCond.Status == apiextv1.ConditionTrue || customresource.Established(crd) {
		if err := s.serveCRD(ctx, want); err != nil {
			return err
		}
		customresource.SetCondition(want, condition(apiextv1.Established, apiextv1.ConditionTrue, "InitialNamesAccepted", "the initial names have been accepted"))
	}
	if sv := customresource.StorageVersion(want); sv != "" && !slices.Contains(want.Status.StoredVersions, sv) {
		want.Status.StoredVersions = append(want.Status.StoredVersions, sv)
	}
	return s.writeCRDStatus(ctx, crd, want)
}

func condition(t apiextv1.CustomResourceDefinitionConditionType, st apiextv1.ConditionStatus, reason, msg string) apiextv1.CustomResourceDefinitionCondition {
	return apiextv1.CustomResourceDefinitionCondition{Type: t, Status: st, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

// writeCRDStatus stores want's status if it differs from crd's. Only the status: the rest may
// have changed since crd was read (a DELETE adding the cleanup finalizer).
func (s *Server) writeCRDStatus(ctx context.Context, crd, want *apiextv1.CustomResourceDefinition) error {
	if equalCRDStatus(&crd.Status, &want.Status) {
		return nil
	}
	crds := s.resources[crdsGVR]
	_, err := crds.store.Update(ctx, "", crd.Name, func(cur storage.Object) (storage.Object, error) {
		c := cur.(*apiextv1.CustomResourceDefinition)
		if c.UID != want.UID || c.Generation != want.Generation {
			return nil, apierrors.NewConflict(crdsGVR.GroupResource(), crd.Name, errors.New("changed meanwhile"))
		}
		next := c.DeepCopy()
		next.Status = want.Status
		return next, nil
	}, crds.claims, false)
	return err
}

func equalCRDStatus(a, b *apiextv1.CustomResourceDefinitionStatus) bool {
	if len(a.Conditions) != len(b.Conditions) || !slices.Equal(a.StoredVersions, b.StoredVersions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	an, bn := a.AcceptedNames, b.AcceptedNames
	return an.Plural == bn.Plural && an.Singular == bn.Singular && an.Kind == bn.Kind && an.ListKind == bn.ListKind &&
		slices.Equal(an.ShortNames, bn.ShortNames) && slices.Equal(an.Categories, bn.Categories)
}

// acceptNames decides which of crd's names it may have: those no other resource of its group
// holds. A conflict keeps the names accepted before (if any) and says why.
func (s *Server) acceptNames(crd *apiextv1.CustomResourceDefinition) (apiextv1.CustomResourceDefinitionNames, apiextv1.CustomResourceDefinitionCondition) {
	want := crd.Spec.Names
	taken := map[string]string{} // name → kind of name, among the group's other resources
	for _, r := range s.ordered {
		if r.info.GroupVersion.Group == crd.Spec.Group {
			taken["plural/"+r.info.Resource] = r.info.Resource
			taken["kind/"+r.info.Kind] = r.info.Kind
		}
	}
	s.custom.mu.RLock()
	for name, sc := range s.custom.byCRD {
		if name == crd.Name || groupOf(name) != crd.Spec.Group {
			continue
		}
		n := sc.names
		taken["plural/"+n.Plural] = n.Plural
		taken["singular/"+n.Singular] = n.Singular
		taken["kind/"+n.Kind] = n.Kind
		taken["listkind/"+n.ListKind] = n.ListKind
		for _, sn := range n.ShortNames {
			taken["short/"+sn] = sn
		}
	}
	s.custom.mu.RUnlock()
	conflict := func(reason, key, value string) (apiextv1.CustomResourceDefinitionNames, apiextv1.CustomResourceDefinitionCondition) {
		return crd.Status.AcceptedNames, condition(apiextv1.NamesAccepted, apiextv1.ConditionFalse, reason, fmt.Sprintf("%q is already in use", value))
	}
	switch {
	case taken["plural/"+want.Plural] != "" || taken["singular/"+want.Plural] != "":
		return conflict("PluralConflict", "plural", want.Plural)
	case want.Singular != "" && (taken["singular/"+want.Singular] != "" || taken["plural/"+want.Singular] != ""):
		return conflict("SingularConflict", "singular", want.Singular)
	case taken["kind/"+want.Kind] != "" || taken["listkind/"+want.Kind] != "":
		return conflict("KindConflict", "kind", want.Kind)
	case taken["listkind/"+want.ListKind] != "" || taken["kind/"+want.ListKind] != "":
		return conflict("ListKindConflict", "listKind", want.ListKind)
	}
	for _, sn := range want.ShortNames {
		if taken["short/"+sn] != "" || taken["plural/"+sn] != "" || taken["singular/"+sn] != "" {
			return conflict("ShortNamesConflict", "shortNames", sn)
		}
	}
	return want, condition(apiextv1.NamesAccepted, apiextv1.ConditionTrue, "NoConflicts", "no conflicts found")
}

// serveCRD serves the versions of crd (with its accepted names in status), replacing what an
// older generation of it served. The new resources' watch caches are filled before they are
// served, so a client that sees Established can use them at once.
func (s *Server) serveCRD(ctx context.Context, crd *apiextv1.CustomResourceDefinition) error {
	s.custom.mu.RLock()
	cur := s.custom.byCRD[crd.Name]
	s.custom.mu.RUnlock()
	if cur != nil && cur.uid == crd.UID && cur.generation == crd.Generation && equalNames(cur.names, crd.Status.AcceptedNames) {
		return nil
	}
	sc := &servedCRD{uid: crd.UID, generation: crd.Generation, names: crd.Status.AcceptedNames}
	// One store holds the CRD's objects, in whichever version each was written; every served
	// version reads and writes it through a converter.
	storageVersion := customresource.StorageVersion(crd)
	var stored *customresource.Resource
	for i := range crd.Spec.Versions {
		if v := &crd.Spec.Versions[i]; v.Name == storageVersion {
			var err error
			if stored, err = customresource.NewResource(crd, v); err != nil {
				return fmt.Errorf("version %s: %w", v.Name, err)
			}
		}
	}
	if stored == nil {
		return fmt.Errorf("no storage version")
	}
	conv, err := customresource.NewConverter(crd, s.resolveService)
	if err != nil {
		return fmt.Errorf("spec.conversion: %w", err)
	}
	sc.converter = conv
	sc.store = storage.NewStore(s.cfg.Etcd, crCodec{stored}, crStoreConfig(stored), s.cfg.Cache)
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if !v.Served {
			continue
		}
		st, err := customresource.NewResource(crd, v)
		if err != nil {
			conv.Close()
			return fmt.Errorf("version %s: %w", v.Name, err)
		}
		r := s.newCustomResource(st, sc.store, crVersion{conv: conv, served: st, stored: stored.Describe().GroupVersion})
		r.terminating = &sc.terminating
		sc.resources = append(sc.resources, r)
		if v.Name == storageVersion {
			sc.storageVersion = r
		}
	}
	// Discovery lists a group's versions by Kubernetes' version priority: v2 > v1 > v1beta1.
	sort.SliceStable(sc.resources, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(sc.resources[i].info.GroupVersion.Version, sc.resources[j].info.GroupVersion.Version) > 0
	})
	storeCtx, cancel := context.WithCancel(ctx)
	sc.stop = func() {
		cancel()
		conv.Close()
	}
	sc.stopped.Go(func() { sc.store.Run(storeCtx) })
	if err := sc.store.WaitReady(ctx); err != nil {
		sc.stop()
		sc.stopped.Wait()
		return err
	}
	s.custom.mu.Lock()
	old := s.custom.byCRD[crd.Name]
	if old != nil {
		for _, r := range old.resources {
			delete(s.custom.byGVR, r.info.GroupVersion.WithResource(r.info.Resource))
		}
	}
	s.custom.byCRD[crd.Name] = sc
	for _, r := range sc.resources {
		s.custom.byGVR[r.info.GroupVersion.WithResource(r.info.Resource)] = r
	}
	s.custom.mu.Unlock()
	if old != nil {
		old.stop()
		old.stopped.Wait()
	}
	s.resourcesChanged()
	return nil
}

func equalNames(a, b apiextv1.CustomResourceDefinitionNames) bool {
	return a.Plural == b.Plural && a.Singular == b.Singular && a.Kind == b.Kind && a.ListKind == b.ListKind &&
		slices.Equal(a.ShortNames, b.ShortNames) && slices.Equal(a.Categories, b.Categories)
}

// stopServing removes what a CRD served.
func (s *Server) stopServing(name string) {
	s.custom.mu.Lock()
	sc := s.custom.byCRD[name]
	if sc != nil {
		delete(s.custom.byCRD, name)
		for _, r := range sc.resources {
			delete(s.custom.byGVR, r.info.GroupVersion.WithResource(r.info.Resource))
		}
	}
	s.custom.mu.Unlock()
	if sc != nil {
		sc.stop()
		sc.stopped.Wait()
		s.resourcesChanged()
	}
}

func (s *Server) stopAllCRDs() {
	s.custom.mu.RLock()
	names := make([]string, 0, len(s.custom.byCRD))
	for n := range s.custom.byCRD {
		names = append(names, n)
	}
	s.custom.mu.RUnlock()
	for _, n := range names {
		s.stopServing(n)
	}
}

// finalizeCRD deletes a deleted CRD's objects (through the API's delete, so their own
// finalizers are honoured), then drops its cleanup finalizer; creates are refused meanwhile.
func (s *Server) finalizeCRD(ctx context.Context, crd *apiextv1.CustomResourceDefinition) error {
	if !slices.Contains(crd.Finalizers, customresource.CleanupFinalizer) {
		return nil
	}
	want := crd.DeepCopy()
	customresource.SetCondition(want, condition(apiextv1.Terminating, apiextv1.ConditionTrue, "InstanceDeletionInProgress", "CustomResource deletion is in progress"))
	s.custom.mu.RLock()
	sc := s.custom.byCRD[crd.Name]
	s.custom.mu.RUnlock()
	if sc != nil && len(sc.resources) > 0 {
		sc.terminating.Store(true)
		if err := s.writeCRDStatus(ctx, crd, want); err != nil {
			return err
		}
		// Through the storage version when it is served: its objects need no conversion,
		// so a conversion webhook that is down does not hold the deletion up.
		res := sc.resources[0]
		if sc.storageVersion != nil {
			res = sc.storageVersion
		}
		list, err := res.store.List(ctx, "", storage.ListOptions{})
		if err != nil {
			return err
		}
		items := listItems(list)
		for _, o := range items {
			if _, err := s.deleteObject(ctx, res, o.GetNamespace(), o.GetName(), &metav1.DeleteOptions{}, nil); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if len(items) > 0 {
			return fmt.Errorf("waiting for %d %s to be deleted", len(items), res.info.Resource)
		}
	}
	s.stopServing(crd.Name)
	crds := s.resources[crdsGVR]
	updated, err := crds.store.Update(ctx, "", crd.Name, func(cur storage.Object) (storage.Object, error) {
		next := cur.(*apiextv1.CustomResourceDefinition).DeepCopy()
		next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == customresource.CleanupFinalizer })
		customresource.SetCondition(next, condition(apiextv1.Terminating, apiextv1.ConditionTrue, "InstanceDeletionCompleted", "removed all instances"))
		return next, nil
	}, crds.claims, false)
	if err != nil {
		return err
	}
	if deletionComplete(updated) {
		if _, err := crds.store.Delete(ctx, "", crd.Name, nil, crds.claims, false); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// finalizersOnDelete are the finalizers a deleted object waits for: its own, the garbage
// collector's that the delete options ask for, and, for a CRD, the cleanup of its objects.
func finalizersOnDelete(res *resource, cur storage.Object, opts *metav1.DeleteOptions) []string {
	f := gcFinalizers(cur.GetFinalizers(), opts)
	if res.info.GroupResource() == crdsGVR.GroupResource() && cur.GetDeletionTimestamp() == nil && !slices.Contains(f, customresource.CleanupFinalizer) {
		f = append(f, customresource.CleanupFinalizer)
	}
	return f
}

// resourcesChanged is called when CRDs add or remove served resources: the discovery and
// OpenAPI documents are built again on the next request.
func (s *Server) resourcesChanged() {
	s.discoveryChanged()
	s.openapi.invalidate()
}

// resolveService finds where a webhook's Service is reached: its ClusterIP and port, as
// kube-apiserver's default service resolver does (the host's service proxy carries the
// connection to an endpoint).
func (s *Server) resolveService(_ context.Context, namespace, name string, port int32) (string, error) {
	obj, err := s.resources[servicesGVR].store.GetCached(namespace, name)
	if err != nil {
		return "", err
	}
	svc := obj.(*corev1.Service)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return net.JoinHostPort(svc.Spec.ExternalName, strconv.Itoa(int(port))), nil
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", fmt.Errorf("service %s/%s has no cluster IP", namespace, name)
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port))), nil
		}
	}
	return "", fmt.Errorf("service %s/%s has no port %d", namespace, name, port)
}
