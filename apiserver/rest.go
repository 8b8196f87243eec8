package apiserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	admissionv1 "k8s.io/api/admission/v1"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

func dryRun(r *http.Request) (bool, error) {
	values := r.URL.Query()["dryRun"]
	for _, v := range values {
		if v != "All" {
			return false, apierrors.NewBadRequest(fmt.Sprintf("unsupported dryRun value %q: only \"All\" is supported", v))
		}
	}
	return len(values) > 0, nil
}

// predicate parses the label and field selectors of a list or watch request.
func predicate(res *resource, r *http.Request) (storage.Predicate, error) {
	q := r.URL.Query()
	p := storage.Predicate{Attrs: func(o storage.Object) (labels.Set, fields.Set) {
		return labels.Set(o.GetLabels()), res.strategy.SelectableFields(o)
	}}
	var err error
	if p.Label, err = labels.Parse(q.Get("labelSelector")); err != nil {
		return p, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	if p.Field, err = fields.ParseSelector(q.Get("fieldSelector")); err != nil {
		return p, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
	}
	// Every field a selector names must be one the resource supports.
	for _, req := range p.Field.Requirements() {
		if _, ok := res.selectable[req.Field]; !ok {
			return p, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return p, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, req request) {
	out, err := negotiateFor(r, req.res)
	if err != nil {
		writeError(w, err)
		return
	}
	var obj storage.Object
	switch rv := r.URL.Query().Get("resourceVersion"); rv {
	case "0":
		obj, err = req.res.store.GetCached(req.namespace, req.name)
	case "":
		obj, err = req.res.store.Get(r.Context(), req.namespace, req.name)
	default:
		if _, err = storage.ParseResourceVersion(rv); err == nil {
			obj, err = req.res.store.Get(r.Context(), req.namespace, req.name)
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.writeRead(w, r, out, req.res, obj, nil)
}

// writeRead answers a get (obj) or list (list) in the negotiated form.
func (s *Server) writeRead(w http.ResponseWriter, r *http.Request, out output, res *resource, obj storage.Object, list runtime.Object) {
	switch out {
	case outputTable:
		objs, rv, cont := []storage.Object{obj}, "", ""
		if obj != nil {
			rv = obj.GetResourceVersion()
		} else {
			objs = listItems(list)
			lm, _ := meta.ListAccessor(list)
			rv, cont = lm.GetResourceVersion(), lm.GetContinue()
		}
		t, err := toTable(res, objs, rv, r.URL.Query().Get("includeObject"), true)
		if err != nil {
			writeError(w, err)
			return
		}
		t.Continue = cont
		writeObject(w, http.StatusOK, outputJSON, t)
	case outputPartialMetadata:
		if obj != nil {
			writeObject(w, http.StatusOK, outputJSON, partialMetadata(obj))
			return
		}
		lm, _ := meta.ListAccessor(list)
		pl := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
		pl.ResourceVersion, pl.Continue = lm.GetResourceVersion(), lm.GetContinue()
		for _, o := range listItems(list) {
			pl.Items = append(pl.Items, *partialMetadata(o))
		}
		writeObject(w, http.StatusOK, outputJSON, pl)
	default:
		if obj != nil {
			writeObject(w, http.StatusOK, out, obj)
			return
		}
		writeObject(w, http.StatusOK, out, list)
	}
}

func partialMetadata(obj storage.Object) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		if md, ok := o.Object["metadata"].(map[string]any); ok {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(md, &m.ObjectMeta)
		}
	case metav1.ObjectMetaAccessor:
		m.ObjectMeta = *o.GetObjectMeta().(*metav1.ObjectMeta)
	}
	return m
}

func listOptions(r *http.Request, pred storage.Predicate) (storage.ListOptions, error) {
	q := r.URL.Query()
	opts := storage.ListOptions{ResourceVersion: q.Get("resourceVersion"), Continue: q.Get("continue"), Predicate: pred}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil || n < 0 {
			return opts, apierrors.NewBadRequest(fmt.Sprintf("invalid limit %q", l))
		}
		opts.Limit = n
	}
	if _, err := storage.ParseResourceVersion(opts.ResourceVersion); err != nil {
		return opts, err
	}
	if opts.Continue != "" && opts.ResourceVersion != "" {
		return opts, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
	}
	switch m := q.Get("resourceVersionMatch"); m {
	case "":
	case string(metav1.ResourceVersionMatchNotOlderThan):
		if opts.ResourceVersion == "" {
			return opts, invalidOption("resourceVersionMatch", m, "resourceVersionMatch is forbidden unless resourceVersion is provided")
		}
	case string(metav1.ResourceVersionMatchExact):
		if opts.ResourceVersion == "" || opts.ResourceVersion == "0" {
			return opts, invalidOption("resourceVersionMatch", m, "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\" or \"\"")
		}
		opts.Exact = true
	default:
		return opts, invalidOption("resourceVersionMatch", m, "supported values: \"Exact\", \"NotOlderThan\"")
	}
	return opts, nil
}

func invalidOption(name, value, msg string) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "",
		field.ErrorList{field.Invalid(field.NewPath(name), value, msg)})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, req request) {
	out, err := negotiateFor(r, req.res)
	if err != nil {
		writeError(w, err)
		return
	}
	pred, err := predicate(req.res, r)
	if err != nil {
		writeError(w, err)
		return
	}
	opts, err := listOptions(r, pred)
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := req.res.store.List(r.Context(), req.namespace, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	list.GetObjectKind().SetGroupVersionKind(req.res.info.GroupVersion.WithKind(req.res.info.Kind + "List"))
	s.writeRead(w, r, out, req.res, nil, list)
}

const generateNameChars = "bcdfghjklmnpqrstvwxz2456789"

func generateName(base string) string {
	const maxBase = 63 - 5
	if len(base) > maxBase {
		base = base[:maxBase]
	}
	b := make([]byte, 5)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(generateNameChars))))
		b[i] = generateNameChars[n.Int64()]
	}
	return base + string(b)
}

// checkNamespace enforces namespace lifecycle: content goes only into namespaces that exist
// and are not terminating.
func (s *Server) checkNamespace(ctx context.Context, res *resource, ns string) error {
	if !res.info.Namespaced {
		return nil
	}
	nsStore := s.resources[namespacesGVR].store
	obj, err := nsStore.GetCached("", ns)
	if apierrors.IsNotFound(err) || (err == nil && obj.GetDeletionTimestamp() == nil && s.terminatedRecently(ns)) {
		// The cache may lag a namespace created or deleted a moment ago.
		obj, err = nsStore.Get(ctx, "", ns)
	}
	if err != nil {
		return err
	}
	if obj.GetDeletionTimestamp() != nil {
		e := apierrors.NewForbidden(res.info.GroupResource(), "", fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
		e.ErrStatus.Details.Causes = append(e.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", ns), Field: "metadata.namespace"})
		return e
	}
	return nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, req request) {
	obj, status, err := s.createObject(w, r, req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, r, status, obj)
}

func (s *Server) createObject(w http.ResponseWriter, r *http.Request, req request) (storage.Object, int, error) {
	res := req.res
	ctx := r.Context()
	wr, err := parseWrite(r)
	if err != nil {
		return nil, 0, err
	}
	if res.terminating != nil && res.terminating.Load() {
		err := apierrors.NewMethodNotSupported(res.info.GroupResource(), "create")
		err.ErrStatus.Message = "create not allowed while custom resource definition is terminating"
		return nil, 0, err
	}
	obj := res.strategy.NewObject()
	if err := decodeBody(w, res, wr.body, mediaType(r), wr.fv, obj); err != nil {
		return nil, 0, err
	}
	created, err := s.createChecked(ctx, req, obj, wr.dry)
	if err != nil {
		return nil, 0, err
	}
	return created, http.StatusCreated, nil
}

// createChecked creates a client's object in the request's namespace, which must exist and
// not be terminating.
func (s *Server) createChecked(ctx context.Context, req request, obj storage.Object, dry bool) (storage.Object, error) {
	res := req.res
	if res.info.Namespaced {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(req.namespace)
		} else if obj.GetNamespace() != req.namespace {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
	} else {
		obj.SetNamespace("")
	}
	if obj.GetResourceVersion() != "" {
		return nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	if err := s.checkNamespace(ctx, res, req.namespace); err != nil {
		return nil, err
	}
	if err := s.admit(ctx, res, obj); err != nil {
		return nil, err
	}
	return s.createPrepared(ctx, req, obj, dry)
}

// createPrepared fills server-set metadata, defaults, admits, allocates, validates and stores
// a new object. Allocation races (two creates picking one ClusterIP) and generated-name
// collisions are retried from the admitted object. The client's fields are recorded in
// managedFields as req's writer's before admission, as kube-apiserver records them: what
// admission adds belongs to no one.
func (s *Server) createPrepared(ctx context.Context, req request, original storage.Object, dry bool) (storage.Object, error) {
	res := req.res
	generated := original.GetName() == "" && original.GetGenerateName() != ""
	// Admission in kube-apiserver's order: the built-in mutating plugins (default tolerations,
	// priority, LimitRange defaults, default classes, protection finalizers), then the mutating
	// policies and webhooks. They see the object defaulted, as kube-apiserver decodes it; the
	// server gives it its identity (name from generateName, UID) and prepares it (the Create
	// step: initial status, a Job's selector) below, after them.
	original = original.DeepCopyObject().(storage.Object)
	res.strategy.PrepareForAdmission(original)
	original = recordUpdate(req, nil, original)
	if err := res.strategy.AdmitFor(ctx, s.objects(), original, nil, ""); err != nil {
		return nil, err
	}
	if m := s.mutatorsFor(req); !m.empty() {
		mutated, changed, err := s.mutateAdmission(ctx, req, m, admissionv1.Create, original.DeepCopyObject().(storage.Object), nil, dry)
		if err != nil {
			return nil, err
		}
		if changed {
			original = mutated
		}
	}
	admitted := false
	for attempt := 0; ; attempt++ {
		obj := original.DeepCopyObject().(storage.Object)
		if generated {
			obj.SetName(generateName(obj.GetGenerateName()))
		}
		obj.SetUID(uuid.NewUUID())
		obj.SetCreationTimestamp(metav1.Now())
		obj.SetDeletionTimestamp(nil)
		obj.SetDeletionGracePeriodSeconds(nil)
		obj.SetSelfLink("")
		res.strategy.PrepareCreate(obj)
		res.strategy.PrepareCreateFromRequest(ctx, obj)
		errs := res.strategy.AllocateFor(ctx, res.store, obj, nil)
		errs = append(errs, res.strategy.ValidateObject(obj, nil)...)
		errs = append(errs, admissionCELErrors(obj)...)
		if len(errs) > 0 {
			return nil, apierrors.NewInvalid(res.info.GVK().GroupKind(), obj.GetName(), errs)
		}
		// Validating admission judges the first attempt only: a retry differs in its name or
		// allocated values, not in what it uses, and is not charged twice. Kubernetes' order:
		// the built-in validating plugins, the validating policies and webhooks, ResourceQuota.
		if !admitted {
			if err := s.validateBuiltinAdmission(ctx, res, obj, nil, ""); err != nil {
				return nil, err
			}
			if err := s.validateAdmission(ctx, req, admissionv1.Create, obj, nil, dry); err != nil {
				return nil, err
			}
			if err := s.admitQuota(ctx, res, obj, nil, "", dry); err != nil {
				return nil, err
			}
			admitted = true
		}
		created, err := res.store.Create(ctx, obj, res.strategy.ClaimsOf(obj), dry)
		var taken *storage.ErrClaimTaken
		switch {
		case err == nil:
			return created, nil
		case errors.As(err, &taken) && attempt < 5:
			continue
		case apierrors.IsAlreadyExists(err) && generated && attempt < 5:
			continue
		case errors.As(err, &taken):
			return nil, claimTaken(res, obj.GetName(), taken)
		default:
			return nil, err
		}
	}
}

// mergeServerFields carries what clients may not change from the stored object into the new one.
func mergeServerFields(obj, cur storage.Object) {
	if obj.GetUID() == "" {
		obj.SetUID(cur.GetUID())
	}
	obj.SetCreationTimestamp(cur.GetCreationTimestamp())
	obj.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	obj.SetDeletionGracePeriodSeconds(cur.GetDeletionGracePeriodSeconds())
	obj.SetSelfLink("")
}

// updateFunc returns the storage update step shared by PUT, PATCH and the subresources: newObj
// computes the client's intended object from the current one; the result is checked against the
// client's resourceVersion precondition, prepared, allocated and validated.
func (s *Server) updateFunc(ctx context.Context, req request, newObj func(cur storage.Object) (storage.Object, error)) storage.UpdateFunc {
	res := req.res
	dry := dryRunOf(ctx)
	return func(cur storage.Object) (storage.Object, error) {
		obj, err := newObj(cur)
		if err != nil {
			return nil, err
		}
		if obj.GetName() != req.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), req.name))
		}
		if res.info.Namespaced && obj.GetNamespace() == "" {
			obj.SetNamespace(req.namespace)
		}
		if obj.GetNamespace() != req.namespace {
			return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
		}
		if rv := obj.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
			return nil, apierrors.NewConflict(res.info.GroupResource(), req.name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		obj.SetResourceVersion(cur.GetResourceVersion())
		mergeServerFields(obj, cur)
		res.strategy.PrepareUpdate(obj, cur, req.subresource)
		obj = recordUpdate(req, cur, obj)
		if err := res.strategy.AdmitFor(ctx, s.objects(), obj, cur, req.subresource); err != nil {
			return nil, err
		}
		mutated, changed, err := s.mutateAdmission(ctx, req, s.mutatorsFor(req), admissionv1.Update, obj, cur, dry)
		if err != nil {
			return nil, err
		}
		if changed {
			obj = mutated
			obj.SetResourceVersion(cur.GetResourceVersion())
			mergeServerFields(obj, cur)
			res.strategy.PrepareUpdate(obj, cur, req.subresource)
		}
		errs := res.strategy.AllocateFor(ctx, res.store, obj, cur)
		if rw, ok := res.strategy.(registry.RatchetingValidator); ok {
			verrs, warnings := rw.ValidateUpdateWithWarnings(obj, cur)
			errs = append(errs, verrs...)
			for _, w := range warnings {
				warnContext(ctx, w)
			}
		} else {
			errs = append(errs, res.strategy.ValidateObject(obj, cur)...)
		}
		if req.subresource != "" {
			errs = append(errs, res.strategy.ValidateSubresourceWrite(obj, cur, req.subresource)...)
		} else {
			errs = append(errs, admissionCELErrors(obj)...)
		}
		if len(errs) > 0 {
			return nil, apierrors.NewInvalid(res.info.GVK().GroupKind(), req.name, errs)
		}
		if err := s.validateBuiltinAdmission(ctx, res, obj, cur, req.subresource); err != nil {
			return nil, err
		}
		if err := s.validateAdmission(ctx, req, admissionv1.Update, obj, cur, dry); err != nil {
			return nil, err
		}
		return obj, nil
	}
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, req request) {
	res := req.res
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	obj := res.strategy.NewObject()
	if err := decodeBody(w, res, wr.body, mediaType(r), wr.fv, obj); err != nil {
		writeError(w, err)
		return
	}
	finalize := req.subresource == "finalize"
	tryUpdate := s.updateFunc(r.Context(), req, func(cur storage.Object) (storage.Object, error) {
		next := obj.DeepCopyObject().(storage.Object)
		if finalize {
			// Only the namespace's spec.finalizers change through /finalize.
			ns := cur.DeepCopyObject().(*corev1.Namespace)
			ns.Spec.Finalizers = next.(*corev1.Namespace).Spec.Finalizers
			ns.ResourceVersion = next.GetResourceVersion()
			return ns, nil
		}
		return next, nil
	})
	s.writeUpdate(w, r, req, tryUpdate, wr.dry)
}

// writeUpdate runs an update and answers it.
func (s *Server) writeUpdate(w http.ResponseWriter, r *http.Request, req request, tryUpdate storage.UpdateFunc, dry bool) {
	updated, err := s.runUpdate(r.Context(), req, tryUpdate, dry)
	if err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, r, http.StatusOK, updated)
}

// runUpdate runs an update; an object whose deletion was only waiting for its finalizers is
// deleted once they are gone.
func (s *Server) runUpdate(ctx context.Context, req request, tryUpdate storage.UpdateFunc, dry bool) (storage.Object, error) {
	res := req.res
	tryUpdate = s.admittedUpdate(ctx, req, tryUpdate, dry)
	updated, err := res.store.Update(ctx, req.namespace, req.name, tryUpdate, res.claims, dry)
	var taken *storage.ErrClaimTaken
	if errors.As(err, &taken) {
		err = claimTaken(res, req.name, taken)
	}
	if err != nil {
		return nil, err
	}
	if deletionComplete(updated) && !dry {
		rv := updated.GetResourceVersion()
		if _, err := res.store.Delete(ctx, req.namespace, req.name, func(cur storage.Object) error {
			if cur.GetResourceVersion() != rv {
				return errSkipDelete
			}
			return nil
		}, res.claims, false); err != nil && !errors.Is(err, errSkipDelete) && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return updated, nil
}

// claimTaken reports a ClusterIP or NodePort another object took first, as kube-apiserver does:
// the value is invalid because it is already allocated.
func claimTaken(res *resource, name string, taken *storage.ErrClaimTaken) error {
	kind, value, _ := strings.Cut(taken.Claim, "/")
	what := map[string]string{"serviceips": "IP", "nodeports": "port"}[kind]
	return apierrors.NewInvalid(res.info.GVK().GroupKind(), name, field.ErrorList{
		field.Invalid(field.NewPath("spec"), value, fmt.Sprintf("provided %s is already allocated", or(what, kind)))})
}

var errSkipDelete = errors.New("object changed; deletion left to the next writer")

// deletionComplete reports whether an object marked for deletion has nothing left to wait for.
func deletionComplete(obj storage.Object) bool {
	if obj.GetDeletionTimestamp() == nil || len(obj.GetFinalizers()) > 0 {
		return false
	}
	if g := obj.GetDeletionGracePeriodSeconds(); g != nil && *g > 0 {
		return false
	}
	if ns, ok := obj.(*corev1.Namespace); ok && len(ns.Spec.Finalizers) > 0 {
		return false
	}
	return true
}

// gracePeriod is how long a deleted object lingers for its owner to stop it: only pods that are
// bound to a node and still running wait (for their node agent); everything else goes at once.
func gracePeriod(obj storage.Object, opts *metav1.DeleteOptions) int64 {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0
	}
	if opts.GracePeriodSeconds != nil {
		return max(*opts.GracePeriodSeconds, 0)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func parseDeleteOptions(r *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		gvk := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
		var dec runtime.Decoder = jsonSerializer
		switch mediaType(r) {
		case mimeProtobuf:
			dec = protobufSerializer
		case mimeYAML:
			dec = yamlSerializer
		}
		_, _, err := dec.Decode(body, &gvk, opts)
		if runtime.IsNotRegisteredError(err) && dec != protobufSerializer {
			// Kubernetes serves DeleteOptions in every group version, and client-go sends the
			// resource's own (example.com/v1 of a custom resource, as controller-runtime's
			// Delete does); the scheme knows meta's only. The fields are the same in all.
			err = yaml.Unmarshal(body, opts)
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid DeleteOptions: %v", err))
		}
	}
	q := r.URL.Query()
	if g := q.Get("gracePeriodSeconds"); g != "" {
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid gracePeriodSeconds %q", g))
		}
		opts.GracePeriodSeconds = &n
	}
	if p := q.Get("propagationPolicy"); p != "" {
		pp := metav1.DeletionPropagation(p)
		opts.PropagationPolicy = &pp
	}
	if d := q["dryRun"]; len(d) > 0 {
		opts.DryRun = d
	}
	var errs field.ErrorList
	if p := opts.PropagationPolicy; p != nil && *p != metav1.DeletePropagationBackground && *p != metav1.DeletePropagationForeground && *p != metav1.DeletePropagationOrphan {
		errs = append(errs, field.NotSupported(field.NewPath("propagationPolicy"), *p, []string{"Background", "Foreground", "Orphan"}))
	}
	if opts.PropagationPolicy != nil && opts.OrphanDependents != nil {
		errs = append(errs, field.Invalid(field.NewPath("propagationPolicy"), *opts.PropagationPolicy, "orphanDependents and propagationPolicy cannot both be set"))
	}
	for _, d := range opts.DryRun {
		if d != "All" {
			errs = append(errs, field.NotSupported(field.NewPath("dryRun"), d, []string{"All"}))
		}
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, req request) {
	opts, err := parseDeleteOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	obj, err := s.deleteObject(r.Context(), req.res, req.namespace, req.name, opts, s.deletionAdmission(req, len(opts.DryRun) > 0))
	if err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, r, http.StatusOK, obj)
}

// deleteObject deletes at once, or marks the object for deletion when finalizers, a namespace's
// spec finalizers or a pod's grace period must run first. admit, when not nil, judges the object
// about to be deleted (deletionAdmission), after the client's preconditions.
func (s *Server) deleteObject(ctx context.Context, res *resource, ns, name string, opts *metav1.DeleteOptions, admit func(context.Context, storage.Object) error) (storage.Object, error) {
	dry := len(opts.DryRun) > 0
	check := func(cur storage.Object) error {
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != cur.GetUID() {
				//lint:ignore ST1005 Kubernetes' exact wording, which clients and people match on.
				return apierrors.NewConflict(res.info.GroupResource(), name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, cur.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion() {
				//lint:ignore ST1005 Kubernetes' exact wording, which clients and people match on.
				return apierrors.NewConflict(res.info.GroupResource(), name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, cur.GetResourceVersion()))
			}
		}
		return nil
	}
	if res.info.Resource == "namespaces" && ns == "" && protectedNamespaces[name] {
		return nil, apierrors.NewForbidden(res.info.GroupResource(), name, errors.New("this namespace may not be deleted"))
	}
	for {
		cur, err := res.store.Get(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		if err := check(cur); err != nil {
			return nil, err
		}
		if admit != nil {
			if err := admit(ctx, cur); err != nil {
				return nil, err
			}
		}
		grace := gracePeriod(cur, opts)
		_, isNS := cur.(*corev1.Namespace)
		if len(finalizersOnDelete(res, cur, opts)) == 0 && !isNS && grace == 0 {
			obj, err := res.store.Delete(ctx, ns, name, func(c storage.Object) error {
				if c.GetResourceVersion() != cur.GetResourceVersion() {
					return errSkipDelete
				}
				return nil
			}, res.claims, dry)
			if errors.Is(err, errSkipDelete) {
				continue // changed since we looked: decide again
			}
			return obj, err
		}
		updated, err := res.store.Update(ctx, ns, name, func(c storage.Object) (storage.Object, error) {
			if err := check(c); err != nil {
				return nil, err
			}
			if c.GetResourceVersion() != cur.GetResourceVersion() {
				return nil, errSkipDelete
			}
			finalizers := finalizersOnDelete(res, c, opts)
			markDeleted(c, grace)
			c.SetFinalizers(finalizers)
			return c, nil
		}, res.claims, dry)
		if errors.Is(err, errSkipDelete) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if isNS && !dry {
			s.noteTerminated(name)
		}
		if deletionComplete(updated) && !dry {
			// Nothing left to wait for (a namespace without spec finalizers): remove it now.
			rv := updated.GetResourceVersion()
			obj, err := res.store.Delete(ctx, ns, name, func(c storage.Object) error {
				if c.GetResourceVersion() != rv {
					return errSkipDelete
				}
				return nil
			}, res.claims, false)
			if errors.Is(err, errSkipDelete) {
				continue
			}
			return obj, err
		}
		return updated, nil
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// terminatedRecently reports whether this server marked the namespace Terminating within the
// last minute, long enough for any watch cache to catch up.
func (s *Server) terminatedRecently(ns string) bool {
	s.terminatingMu.Lock()
	defer s.terminatingMu.Unlock()
	at, ok := s.recentlyTerminated[ns]
	if ok && time.Since(at) > time.Minute {
		delete(s.recentlyTerminated, ns)
		return false
	}
	return ok
}

// noteTerminated records that ns was just marked Terminating, forgetting old entries.
func (s *Server) noteTerminated(ns string) {
	s.terminatingMu.Lock()
	defer s.terminatingMu.Unlock()
	for name, at := range s.recentlyTerminated {
		if time.Since(at) > time.Minute {
			delete(s.recentlyTerminated, name)
		}
	}
	s.recentlyTerminated[ns] = time.Now()
}

// protectedNamespaces are the namespaces a cluster cannot work without.
var protectedNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true}

// gcFinalizers returns finalizers with the garbage collector's two ("orphan", "foregroundDeletion")
// set as the delete options ask: propagationPolicy Orphan (or orphanDependents=true) adds
// "orphan", Foreground adds "foregroundDeletion", Background (or orphanDependents=false) adds
// neither; each removes the other. Without either option the object's own choice stands, and
// when it has none the default, Background, sets no finalizer.
func gcFinalizers(finalizers []string, opts *metav1.DeleteOptions) []string {
	orphan := slices.Contains(finalizers, metav1.FinalizerOrphanDependents)
	foreground := !orphan && slices.Contains(finalizers, metav1.FinalizerDeleteDependents)
	//lint:ignore SA1019 the deprecated orphanDependents is still part of the API.
	if o := opts.OrphanDependents; o != nil {
		orphan, foreground = *o, false
	} else if p := opts.PropagationPolicy; p != nil {
		orphan, foreground = *p == metav1.DeletePropagationOrphan, *p == metav1.DeletePropagationForeground
	}
	out := make([]string, 0, len(finalizers)+1)
	for _, f := range finalizers {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			out = append(out, f)
		}
	}
	switch {
	case orphan:
		out = append(out, metav1.FinalizerOrphanDependents)
	case foreground:
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// markDeleted sets deletionTimestamp (once; a shorter grace period may shorten it).
func markDeleted(obj storage.Object, grace int64) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	if ts := obj.GetDeletionTimestamp(); ts != nil {
		if g := obj.GetDeletionGracePeriodSeconds(); g != nil && grace < *g {
			deadline := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
			obj.SetDeletionTimestamp(&deadline)
			obj.SetDeletionGracePeriodSeconds(&grace)
		}
		return
	}
	deadline := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
	obj.SetDeletionTimestamp(&deadline)
	obj.SetDeletionGracePeriodSeconds(&grace)
	if ns, ok := obj.(*corev1.Namespace); ok {
		ns.Status.Phase = corev1.NamespaceTerminating
	}
}

func (s *Server) deleteCollection(w http.ResponseWriter, r *http.Request, req request) {
	pred, err := predicate(req.res, r)
	if err != nil {
		writeError(w, err)
		return
	}
	opts, err := parseDeleteOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := req.res.store.List(r.Context(), req.namespace, storage.ListOptions{Predicate: pred})
	if err != nil {
		writeError(w, err)
		return
	}
	admit := s.deletionAdmission(req, len(opts.DryRun) > 0)
	var deleted []runtime.Object
	for _, item := range listItems(list) {
		obj, err := s.deleteObject(r.Context(), req.res, item.GetNamespace(), item.GetName(), opts, admit)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			writeError(w, err)
			return
		}
		deleted = append(deleted, obj)
	}
	out := req.res.strategy.NewListObject()
	if err := setListItems(out, deleted); err != nil {
		writeError(w, err)
		return
	}
	out.GetObjectKind().SetGroupVersionKind(req.res.info.GroupVersion.WithKind(req.res.info.Kind + "List"))
	writeResult(w, r, http.StatusOK, out)
}

// createBinding binds a pod to a node (pods/binding and the legacy bindings resource).
func (s *Server) createBinding(w http.ResponseWriter, r *http.Request, ns, podName string) {
	wr, err := parseWrite(r)
	if err != nil {
		writeError(w, err)
		return
	}
	binding := &corev1.Binding{}
	if err := decodeObject(w, wr.body, mediaType(r), wr.fv, corev1.SchemeGroupVersion.WithKind("Binding"), binding); err != nil {
		writeError(w, err)
		return
	}
	if podName == "" {
		podName = binding.Name
	}
	if binding.Name != podName {
		writeError(w, apierrors.NewBadRequest("the name of the binding does not match the name of the pod"))
		return
	}
	if binding.Target.Name == "" || (binding.Target.Kind != "" && binding.Target.Kind != "Node") {
		writeError(w, apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, podName, field.ErrorList{
			field.Invalid(field.NewPath("target"), binding.Target, "must name a Node")}))
		return
	}
	pods := s.resources[schema.GroupVersionResource{Version: "v1", Resource: "pods"}]
	_, err = pods.store.Update(r.Context(), ns, podName, func(cur storage.Object) (storage.Object, error) {
		pod := cur.(*corev1.Pod)
		if pod.DeletionTimestamp != nil {
			return nil, apierrors.NewConflict(pods.info.GroupResource(), podName, errors.New("pod is being deleted, cannot be assigned to a host"))
		}
		if pod.Spec.NodeName != "" {
			return nil, apierrors.NewConflict(pods.info.GroupResource(), podName, fmt.Errorf("pod %s is already assigned to node %q", podName, pod.Spec.NodeName))
		}
		if uid := binding.UID; uid != "" && uid != pod.UID {
			return nil, apierrors.NewConflict(pods.info.GroupResource(), podName, errors.New("the UID in the binding does not match the pod's"))
		}
		pod.Spec.NodeName = binding.Target.Name
		setPodScheduled(pod)
		return pod, nil
	}, nil, wr.dry)
	if err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, r, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

func setPodScheduled(pod *corev1.Pod) {
	now := metav1.Now()
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			pod.Status.Conditions[i].Status = corev1.ConditionTrue
			pod.Status.Conditions[i].LastTransitionTime = now
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now})
}
