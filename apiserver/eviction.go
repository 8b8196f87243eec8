package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	policyv1beta1 "k8s.io/api/policy/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The pods/eviction subresource: a POST of an Eviction asks to delete a pod unless that would
// take more of its application down than its PodDisruptionBudget allows. A pod that is not
// running (finished, pending or already being deleted) goes at once; otherwise the one budget
// selecting it must allow a disruption, which the eviction takes (status.disruptionsAllowed
// down by one, the pod recorded in status.disruptedPods) in the same conflict-checked write
// that checked it, before the pod is deleted. The disruption controller recomputes the budget
// from the pods afterwards. This follows Kubernetes v1.36's eviction REST handler.

var (
	budgetsGVR  = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")
	evictionGVK = policyv1.SchemeGroupVersion.WithKind("Eviction")
)

const (
	// maxDisruptedPods bounds status.disruptedPods: past it, evictions the controller has not
	// confirmed yet pile up, and new ones are refused until it catches up.
	maxDisruptedPods = 2000
	// evictionRetries and evictionRetryWait pace the retries when the pod changes between our
	// read and its deletion, as Kubernetes paces them (20 tries, 0.5 s apart).
	evictionRetries   = 20
	evictionRetryWait = 500 * time.Millisecond
	// reasonEvictionAPI is the DisruptionTarget condition's reason on evicted pods.
	reasonEvictionAPI = "EvictionByEvictionAPI"
	// budgetBusyRetry is the Retry-After of an eviction refused because the budget's status is
	// not up to date with its spec yet.
	budgetBusyRetry = 10
)

// evictionCodecs decode Eviction bodies: policy/v1, and policy/v1beta1, which older clients
// send and which is otherwise not served, so it stays out of the shared scheme.
var evictionCodecs = func() map[string][2]runtime.Decoder {
	s := runtime.NewScheme()
	s.AddKnownTypes(policyv1.SchemeGroupVersion, &policyv1.Eviction{})
	s.AddKnownTypes(policyv1beta1.SchemeGroupVersion, &policyv1beta1.Eviction{})
	js := func(o json.SerializerOptions) runtime.Decoder {
		return json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, o)
	}
	pb := protobuf.NewSerializer(s, s)
	// [lenient, strict] for each media type.
	return map[string][2]runtime.Decoder{
		mimeJSON:     {js(json.SerializerOptions{}), js(json.SerializerOptions{Strict: true})},
		mimeYAML:     {js(json.SerializerOptions{Yaml: true}), js(json.SerializerOptions{Yaml: true, Strict: true})},
		mimeProtobuf: {pb, pb},
	}
}()

// decodeEviction decodes a policy/v1 or policy/v1beta1 Eviction (a body without apiVersion and
// kind is taken as policy/v1) into its policy/v1 form.
func decodeEviction(w http.ResponseWriter, data []byte, contentType string, fv fieldValidation) (*policyv1.Eviction, error) {
	decs, ok := evictionCodecs[contentType]
	if !ok {
		return nil, unsupportedMediaType(mimeJSON, mimeYAML, mimeProtobuf)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, apierrors.NewBadRequest("the request body is empty")
	}
	dec := decs[1]
	if fv == validationIgnore {
		dec = decs[0]
	}
	obj, gvk, err := dec.Decode(data, &evictionGVK, nil)
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		switch {
		case isStrict && obj != nil && fv == validationStrict:
			return nil, apierrors.NewBadRequest(strictErr.Error())
		case isStrict && obj != nil:
			for _, e := range strictErr.Errors() {
				addWarning(w, e.Error())
			}
		case gvk != nil && gvk.Kind != "":
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a Eviction: %s",
				gvk.Kind, gvk.Version, "the eviction subresource takes policy/v1 or policy/v1beta1 Evictions"))
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type Eviction): %v", err))
		}
	}
	switch e := obj.(type) {
	case *policyv1.Eviction:
		return e, nil
	case *policyv1beta1.Eviction:
		return &policyv1.Eviction{ObjectMeta: e.ObjectMeta, DeleteOptions: e.DeleteOptions}, nil
	}
	return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Eviction object: %T", obj))
}

// serveEviction serves POST pods/<name>/eviction: 201 with a Success Status once the pod is
// being deleted; 429 while its budget allows no disruption.
func (s *Server) serveEviction(w http.ResponseWriter, r *http.Request, req request) {
	if r.Method != http.MethodPost {
		writeError(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "pods/eviction"}, r.Method))
		return
	}
	opts, err := s.evictionRequest(w, r, req)
	if err == nil {
		err = s.evict(r.Context(), req.namespace, req.name, opts)
	}
	if err != nil {
		// A client told when to come back does not need to guess (client-go waits as told).
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			if d := st.Status().Details; d != nil && d.RetryAfterSeconds > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(d.RetryAfterSeconds)))
			}
		}
		writeError(w, err)
		return
	}
	writeResult(w, r, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

// evictionRequest decodes and checks the Eviction, and returns the delete options the pod is
// deleted with. Everything a deletion would refuse is refused here, before any write.
func (s *Server) evictionRequest(w http.ResponseWriter, r *http.Request, req request) (*metav1.DeleteOptions, error) {
	wr, err := parseWrite(r)
	if err != nil {
		return nil, err
	}
	ev, err := decodeEviction(w, wr.body, mediaType(r), wr.fv)
	if err != nil {
		return nil, err
	}
	if ev.Namespace == "" {
		ev.Namespace = req.namespace
	} else if ev.Namespace != req.namespace {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if ev.Name != req.name {
		return nil, apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	opts := &metav1.DeleteOptions{}
	if ev.DeleteOptions != nil {
		opts = ev.DeleteOptions.DeepCopy()
	}
	if deref(opts.IgnoreStoreReadErrorWithClusterBreakingPotential) {
		return nil, apierrors.NewInvalid(evictionGVK.GroupKind(), req.name, field.ErrorList{field.Invalid(
			field.NewPath("deleteOptions", "ignoreStoreReadErrorWithClusterBreakingPotential"), true, "can not be set for pod eviction, try after removing the option")})
	}
	// dryRun may come in the query, in the body's delete options, or both if they agree.
	if wr.dry {
		query := []string{metav1.DryRunAll}
		if len(opts.DryRun) == 0 {
			opts.DryRun = query
		} else if !slices.Equal(opts.DryRun, query) {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("Non-matching dry-run options in request and content: %v and %v", query, opts.DryRun))
		}
	}
	if errs := metav1validation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

func deref[T any](p *T) T {
	if p == nil {
		return *new(T)
	}
	return *p
}

// evict evicts pod ns/name as opts say, or tells why it may not.
func (s *Server) evict(ctx context.Context, ns, name string, opts *metav1.DeleteOptions) error {
	pods := s.resources[podsGVR]
	// A resourceVersion the client gave is its own precondition: its conflicts are its answer.
	clientRV := opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil
	var pod *corev1.Pod
	for attempt := 1; ; attempt++ {
		obj, err := pods.store.Get(ctx, ns, name)
		if err != nil {
			return err
		}
		pod = obj.(*corev1.Pod)
		if !budgetIgnored(pod) {
			break
		}
		// A pod that is not running disrupts nothing: it goes without asking its budget. A
		// pending one must still be pending when it goes, or it may have become ready since.
		del := opts
		if pinVersion(pod) && !clientRV {
			del = withVersion(opts, pod.ResourceVersion)
		}
		err = s.disruptAndDelete(ctx, ns, name, del)
		if !apierrors.IsConflict(err) || clientRV || attempt == evictionRetries {
			return err
		}
		if err := sleepCtx(ctx, evictionRetryWait/10*9+rand.N(evictionRetryWait/5)); err != nil {
			return err
		}
	}

	// Preconditions the pod already fails would fail its deletion after the budget paid for
	// it: refuse before anything is written.
	if err := evictionPreconditions(pod, opts.Preconditions); err != nil {
		return err
	}
	budgets, err := s.budgetsOf(ctx, pod)
	if err != nil {
		return err
	}
	switch len(budgets) {
	case 0:
		return s.disruptAndDelete(ctx, ns, name, opts)
	case 1:
	default:
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}
	}
	pdb := budgets[0]
	// An unready pod adds nothing to the budget's healthy count: taking it away does not use a
	// disruption, if the budget says so (AlwaysAllow) or is met without it (IfHealthyBudget,
	// the default).
	unhealthy := false
	if !podReady(pod) {
		if deref(pdb.Spec.UnhealthyPodEvictionPolicy) == policyv1.AlwaysAllow {
			unhealthy = true
		} else if pdb.Status.DesiredHealthy > 0 && pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy {
			unhealthy = true
		}
	}
	del := opts
	if unhealthy {
		// Only while it is still the pod we judged unready.
		del = withVersion(opts, pod.ResourceVersion)
	} else if err := s.takeDisruption(ctx, pdb, pod.Name, len(opts.DryRun) > 0); err != nil {
		return err
	}
	err = s.disruptAndDelete(ctx, ns, name, del)
	if apierrors.IsConflict(err) && unhealthy && !clientRV {
		return budgetBusy(pdb.Name) // it changed, maybe became ready: ask again
	}
	return err
}

// budgetIgnored: finished, pending and terminating pods are not part of what a budget guards.
func budgetIgnored(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed, corev1.PodPending:
		return true
	}
	return p.DeletionTimestamp != nil
}

// pinVersion: of the pods evicted without a budget, only a pending one could turn into one a
// budget guards before it is deleted.
func pinVersion(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil
}

func withVersion(opts *metav1.DeleteOptions, rv string) *metav1.DeleteOptions {
	o := opts.DeepCopy()
	if o.Preconditions == nil {
		o.Preconditions = &metav1.Preconditions{}
	}
	o.Preconditions.ResourceVersion = &rv
	return o
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// budgetsOf returns the PodDisruptionBudgets of the pod's namespace whose selector matches it.
// A budget with an invalid selector matches nothing.
func (s *Server) budgetsOf(ctx context.Context, pod *corev1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	list, err := s.resources[budgetsGVR].store.List(ctx, pod.Namespace, storage.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*policyv1.PodDisruptionBudget
	for _, o := range listItems(list) {
		pdb := o.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, pdb)
		}
	}
	return out, nil
}

// budgetBusy refuses an eviction until the budget's status catches up.
func budgetBusy(name string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", budgetBusyRetry)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s is still being processed by the server.", name)})
	return err
}

// takeDisruption uses one of the budget's allowed disruptions for pod, in one conflict-checked
// write of its status that also checks it may (the storage retries it on a concurrent write,
// so two evictions never take the same disruption). A dry run checks without writing.
func (s *Server) takeDisruption(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pod string, dry bool) error {
	res := s.resources[budgetsGVR]
	req := request{res: res, namespace: pdb.Namespace, name: pdb.Name, subresource: "status"}
	update := s.updateFunc(ctx, req, func(cur storage.Object) (storage.Object, error) {
		b := cur.(*policyv1.PodDisruptionBudget)
		if err := mayDisrupt(b); err != nil {
			return nil, err
		}
		b.Status.DisruptionsAllowed--
		if b.Status.DisruptionsAllowed == 0 {
			apimeta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: policyv1.DisruptionAllowedCondition,
				Status: metav1.ConditionFalse, Reason: policyv1.InsufficientPodsReason, ObservedGeneration: b.Status.ObservedGeneration})
		}
		// The controller counts the pod as gone from now on, until it is deleted or the
		// entry expires (the eviction failed after all).
		if b.Status.DisruptedPods == nil {
			b.Status.DisruptedPods = map[string]metav1.Time{}
		}
		b.Status.DisruptedPods[pod] = metav1.Now()
		return b, nil
	})
	_, err := res.store.Update(ctx, pdb.Namespace, pdb.Name, update, res.claims, dry)
	return err
}

// mayDisrupt tells whether the budget allows one more disruption now, and if not, why, as
// Kubernetes tells it (429 with a DisruptionBudget cause, or 403 for a budget in a state the
// controller never writes).
func mayDisrupt(b *policyv1.PodDisruptionBudget) error {
	forbidden := func(msg string) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: policyv1.GroupName, Resource: "poddisruptionbudget"}, b.Name, errors.New(msg))
	}
	st := &b.Status
	switch {
	case st.ObservedGeneration < b.Generation:
		return budgetBusy(b.Name)
	case st.DisruptionsAllowed < 0:
		return forbidden("pdb disruptions allowed is negative")
	case len(st.DisruptedPods) > maxDisruptedPods:
		return forbidden("DisruptedPods map too big - too many evictions not confirmed by PDB controller")
	case st.DisruptionsAllowed > 0:
		return nil
	}
	cond := apimeta.FindStatusCondition(st.Conditions, policyv1.DisruptionAllowedCondition)
	refused := cond != nil && cond.Status == metav1.ConditionFalse && cond.Message != ""
	var msg string
	switch {
	// A failed sync comes first: the counts it left are not to be trusted.
	case refused && cond.Reason == policyv1.SyncFailedReason:
		msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently because it failed sync: %s", b.Name, cond.Message)
	case st.CurrentHealthy <= st.DesiredHealthy:
		msg = fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", b.Name, st.DesiredHealthy, st.CurrentHealthy)
	case refused:
		msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently (%s): %s", b.Name, cond.Reason, cond.Message)
	default:
		msg = fmt.Sprintf("The disruption budget %s does not allow evicting pods currently", b.Name)
	}
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: msg})
	return err
}

// disruptAndDelete marks the pod with the DisruptionTarget condition (not in a dry run) and
// deletes it with opts. The condition is written to the latest pod, under opts' preconditions;
// a resourceVersion precondition then moves to the version that write made.
func (s *Server) disruptAndDelete(ctx context.Context, ns, name string, opts *metav1.DeleteOptions) error {
	pods := s.resources[podsGVR]
	if len(opts.DryRun) == 0 {
		req := request{res: pods, namespace: ns, name: name, subresource: "status"}
		update := s.updateFunc(ctx, req, func(cur storage.Object) (storage.Object, error) {
			pod := cur.(*corev1.Pod)
			if err := evictionPreconditions(pod, opts.Preconditions); err != nil {
				return nil, err
			}
			setDisruptionTarget(pod, metav1.Now())
			return pod, nil
		})
		updated, err := pods.store.Update(ctx, ns, name, update, pods.claims, false)
		if err != nil {
			return err
		}
		if p := opts.Preconditions; p != nil && p.ResourceVersion != nil {
			opts = withVersion(opts, updated.GetResourceVersion())
		}
	}
	_, err := s.deleteObject(ctx, pods, ns, name, opts, nil)
	return err
}

// evictionPreconditions checks the delete preconditions against the pod about to be marked.
// (Kubernetes names the resource "Pod" in these two conflicts, which clients see.)
func evictionPreconditions(pod *corev1.Pod, p *metav1.Preconditions) error {
	if p == nil {
		return nil
	}
	gr := schema.GroupResource{Resource: "Pod"}
	if uid := p.UID; uid != nil && *uid != "" && *uid != pod.UID {
		return apierrors.NewConflict(gr, pod.Name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *uid, pod.UID))
	}
	if rv := p.ResourceVersion; rv != nil && *rv != "" && *rv != pod.ResourceVersion {
		return apierrors.NewConflict(gr, pod.Name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *rv, pod.ResourceVersion))
	}
	return nil
}

// setDisruptionTarget records on the pod that it is going because of an eviction; the
// transition time changes only when the condition's status does.
func setDisruptionTarget(pod *corev1.Pod, now metav1.Time) {
	want := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: reasonEvictionAPI, Message: "Eviction API: evicting", LastTransitionTime: now}
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type != corev1.DisruptionTarget {
			continue
		}
		if c.Status == want.Status {
			want.LastTransitionTime = c.LastTransitionTime
		}
		*c = want
		return
	}
	pod.Status.Conditions = append(pod.Status.Conditions, want)
}
