package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver/webhook"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// defaultTimeout is a webhook's timeoutSeconds when it sets none.
const defaultTimeout = 10 * time.Second

// Hook is one webhook of a Validating- or MutatingWebhookConfiguration, ready to be called.
type Hook struct {
	Name          string
	configuration string
	rules         []admissionregistrationv1.RuleWithOperations
	failOpen      bool // failurePolicy Ignore
	matchPolicy   *admissionregistrationv1.MatchPolicyType
	nsSelector    *metav1.LabelSelector
	objSelector   *metav1.LabelSelector
	sideEffects   admissionregistrationv1.SideEffectClass
	reviews       string // the AdmissionReview version it takes: v1 or v1beta1
	reinvoke      bool   // reinvocationPolicy IfNeeded (mutating)
	conditions    *Conditions
	client        *webhook.Client
	// broken is why the hook cannot be called (its client config or conditions): each call
	// fails with it, per the failure policy.
	broken error
}

// Hooks are the webhooks of a set of configurations, in the order Kubernetes calls them: by
// configuration name, then in the order each lists them.
type Hooks []*Hook

// Close releases the webhooks' connections.
func (hs Hooks) Close() {
	for _, h := range hs {
		if h.client != nil {
			h.client.Close()
		}
	}
}

// newHook prepares one webhook of configuration (a mutating one's common fields come as a
// ValidatingWebhook).
func newHook(configuration string, w admissionregistrationv1.ValidatingWebhook, resolve webhook.ResolveService) *Hook {
	h := &Hook{Name: w.Name, configuration: configuration, failOpen: w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore,
		rules: w.Rules, nsSelector: w.NamespaceSelector, objSelector: w.ObjectSelector, matchPolicy: w.MatchPolicy}
	if w.SideEffects != nil {
		h.sideEffects = *w.SideEffects
	}
	cc := w.ClientConfig
	for _, v := range w.AdmissionReviewVersions {
		if v == "v1" || v == "v1beta1" {
			h.reviews = v
			break
		}
	}
	if h.reviews == "" {
		h.broken = errors.New("webhook does not accept v1 or v1beta1 AdmissionReview")
		return h
	}
	timeout := defaultTimeout
	if w.TimeoutSeconds != nil {
		timeout = time.Duration(*w.TimeoutSeconds) * time.Second
	}
	cfg := webhook.Config{CABundle: cc.CABundle}
	if cc.URL != nil {
		cfg.URL = *cc.URL
	}
	if s := cc.Service; s != nil {
		cfg.Service = webhook.ServiceOf(s.Namespace, s.Name, s.Path, s.Port)
	}
	var err error
	if h.client, err = webhook.New(cfg, resolve, timeout); err != nil {
		h.broken = fmt.Errorf("could not get REST client: %w", err)
		return h
	}
	var errs field.ErrorList
	if h.conditions, errs = CompileConditions(w.MatchConditions, field.NewPath("matchConditions")); len(errs) > 0 {
		h.broken = errs.ToAggregate()
	}
	return h
}

// ValidatingHooks prepares the webhooks of validating configurations.
func ValidatingHooks(cfgs []*admissionregistrationv1.ValidatingWebhookConfiguration, resolve webhook.ResolveService) Hooks {
	sort.Slice(cfgs, func(i, j int) bool { return cfgs[i].Name < cfgs[j].Name })
	var out Hooks
	for _, c := range cfgs {
		for _, w := range c.Webhooks {
			out = append(out, newHook(c.Name, w, resolve))
		}
	}
	return out
}

// MutatingHooks prepares the webhooks of mutating configurations.
func MutatingHooks(cfgs []*admissionregistrationv1.MutatingWebhookConfiguration, resolve webhook.ResolveService) Hooks {
	sort.Slice(cfgs, func(i, j int) bool { return cfgs[i].Name < cfgs[j].Name })
	var out Hooks
	for _, c := range cfgs {
		for _, w := range c.Webhooks {
			// A mutating webhook has a validating one's fields, and its reinvocation policy.
			h := newHook(c.Name, admissionregistrationv1.ValidatingWebhook{
				Name: w.Name, ClientConfig: w.ClientConfig, Rules: w.Rules, FailurePolicy: w.FailurePolicy, MatchPolicy: w.MatchPolicy,
				NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector, SideEffects: w.SideEffects,
				TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions, MatchConditions: w.MatchConditions,
			}, resolve)
			h.reinvoke = w.ReinvocationPolicy != nil && *w.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy
			out = append(out, h)
		}
	}
	return out
}

// Request is what the webhooks of one request share.
type Request struct {
	*Attributes
	NamespaceLabels NamespaceLabels
	// Warnings collects what webhooks answered as warnings.
	Warnings []string
	vars     map[string]any
}

// callErr is a webhook that could not be called or answered wrongly.
func callErr(h *Hook, err error) error {
	return fmt.Errorf("failed calling webhook %q: %w", h.Name, err)
}

// fail turns a webhook that could not be called into the request's error, or nil when its
// failure policy is Ignore.
func fail(h *Hook, err error) error {
	if h.failOpen {
		slog.Warn("admission webhook failed, failing open", "webhook", h.Name, "err", err)
		return nil
	}
	return apierrors.NewInternalError(callErr(h, err))
}

// matches decides whether h sees the request, and at which version: rules (with its match
// policy), selectors, then match conditions. A condition that cannot be evaluated, or a
// conversion to the version it names that fails, fails per the failure policy.
func (r *Request) matches(ctx context.Context, h *Hook) (*Attributes, *Version, error) {
	v, ok := MatchingVersion(h.rules, h.matchPolicy, r.Attributes)
	if !ok {
		return nil, nil, nil
	}
	ok, err := NamespaceSelected(ctx, h.nsSelector, r.Attributes, r.NamespaceLabels)
	if err != nil || !ok {
		return nil, nil, err
	}
	if ok, err = ObjectSelected(h.objSelector, r.Attributes); err != nil || !ok {
		return nil, nil, err
	}
	view := r.Attributes
	if v != nil {
		if view, err = r.Attributes.AsVersion(ctx, *v); err != nil {
			return nil, nil, fail(h, err)
		}
	}
	if h.broken != nil || h.conditions.Empty() {
		return view, v, nil // a broken hook is called, to fail per its policy
	}
	vars, err := r.baseVariables(view)
	if err != nil {
		return nil, nil, err
	}
	ok, err = h.conditions.Match(vars)
	switch {
	case err != nil:
		return nil, nil, fail(h, err)
	case !ok:
		return nil, nil, nil
	}
	return view, v, nil
}

// dryRunSafe refuses a dry run for webhooks that may have side effects.
func (r *Request) dryRunSafe(h *Hook) error {
	if !r.DryRun {
		return nil
	}
	switch h.sideEffects {
	case admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.SideEffectClassNoneOnDryRun:
		return nil
	}
	return apierrors.NewBadRequest(fmt.Sprintf("admission webhook %q does not support dry run", h.Name))
}

// review is an AdmissionReview of either version (v1 and v1beta1 have the same fields).
type review struct {
	metav1.TypeMeta `json:",inline"`
	Request         *admissionv1.AdmissionRequest  `json:"request,omitempty"`
	Response        *admissionv1.AdmissionResponse `json:"response,omitempty"`
}

// call sends the request to h and checks the answer: the same version and kind, the request's
// uid; a validating webhook may not patch.
func (r *Request) call(ctx context.Context, h *Hook, view *Attributes, mutating bool) (*admissionv1.AdmissionResponse, error) {
	if h.broken != nil {
		return nil, h.broken
	}
	uid := string(uuid.NewUUID())
	req := request(view, uid)
	var err error
	if req.Object.Raw, err = rawJSON(view.Object); err != nil {
		return nil, err
	}
	if req.OldObject.Raw, err = rawJSON(view.OldObject); err != nil {
		return nil, err
	}
	apiVersion := "admission.k8s.io/" + h.reviews
	var resp review
	if err := h.client.Call(ctx, review{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "AdmissionReview"}, Request: req}, &resp); err != nil {
		return nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("received invalid webhook response: "+format, args...)
	}
	switch {
	case resp.Response == nil:
		return nil, invalid("webhook response was absent")
	case h.reviews == "v1" && (resp.APIVersion != apiVersion || resp.Kind != "AdmissionReview"):
		return nil, invalid("expected webhook response of %s, Kind=AdmissionReview, got %s, Kind=%s", apiVersion, resp.APIVersion, resp.Kind)
	case h.reviews == "v1" && string(resp.Response.UID) != uid:
		return nil, invalid("expected response.uid=%q, got %q", uid, resp.Response.UID)
	case !mutating && len(resp.Response.Patch) > 0:
		return nil, invalid("validating webhook may not return response.patch")
	case mutating && h.reviews == "v1" && len(resp.Response.Patch) > 0 && resp.Response.PatchType == nil:
		return nil, invalid("webhook returned response.patch but not response.patchType")
	case mutating && resp.Response.PatchType != nil && *resp.Response.PatchType != admissionv1.PatchTypeJSONPatch:
		return nil, invalid("webhook returned invalid response.patchType of %q", *resp.Response.PatchType)
	}
	r.Warnings = append(r.Warnings, resp.Response.Warnings...)
	return resp.Response, nil
}

func rawJSON(o runtime.Object) ([]byte, error) {
	if o == nil {
		return nil, nil
	}
	return json.Marshal(o)
}

// denied is a webhook's refusal, as Kubernetes words it: its status (at least 400) with the
// message prefixed by the webhook's name.
func denied(h *Hook, result *metav1.Status) error {
	st := metav1.Status{Status: metav1.StatusFailure}
	if result != nil {
		st = *result
	}
	if st.Code < http.StatusBadRequest {
		st.Code = http.StatusBadRequest
	}
	if st.Status == "" || st.Status == metav1.StatusSuccess {
		st.Status = metav1.StatusFailure
	}
	by := fmt.Sprintf("admission webhook %q denied the request", h.Name)
	switch {
	case st.Message != "":
		st.Message = by + ": " + st.Message
	case st.Reason != "":
		st.Message = by + ": " + string(st.Reason)
	default:
		st.Message = by + " without explanation"
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// Validate calls the validating webhooks that match the request, all at once, and returns the
// first refusal in their order.
func (r *Request) Validate(ctx context.Context, hooks Hooks) error {
	var relevant Hooks
	var views []*Attributes
	for _, h := range hooks {
		view, _, err := r.matches(ctx, h)
		if err != nil {
			return err
		}
		if view != nil {
			if err := r.dryRunSafe(h); err != nil {
				return err
			}
			relevant, views = append(relevant, h), append(views, view)
		}
	}
	if len(relevant) == 0 {
		return nil
	}
	errs := make([]error, len(relevant))
	warnings := make([][]string, len(relevant))
	var wg sync.WaitGroup
	for i, h := range relevant {
		wg.Go(func() {
			sub := &Request{Attributes: r.Attributes}
			resp, err := sub.call(ctx, h, views[i], false)
			warnings[i] = sub.Warnings
			switch {
			case err != nil:
				errs[i] = fail(h, err)
			case !resp.Allowed:
				errs[i] = denied(h, resp.Result)
			}
		})
	}
	wg.Wait()
	for _, w := range warnings {
		r.Warnings = append(r.Warnings, w...)
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Mutate runs the mutating phase: the mutating admission policies, then the mutating
// webhooks, each on the object the ones before it left. Then once more, in the same order,
// the policies and webhooks that asked to be reinvoked (IfNeeded) and that something changed
// the object after, including a reinvoked one. It reports whether the object changed.
func (r *Request) Mutate(ctx context.Context, policies MutatingPolicies, pc PolicyContext, hooks Hooks) (bool, error) {
	steps, failed, err := r.mutatingInvocations(ctx, policies, pc)
	if err != nil {
		return false, err
	}
	// mutator is one policy invocation or webhook: run reports whether it ran (matched) and
	// changed the object.
	type mutator struct {
		reinvoke bool
		policy   bool
		run      func() (ran, changed bool, err error)
	}
	var mutators []mutator
	for _, st := range steps {
		mutators = append(mutators, mutator{st.p.reinvoke, true, func() (bool, bool, error) {
			ran, ch, failures, err := r.mutateBy(ctx, st.p, st.inv, pc)
			if !st.p.failOpen {
				for _, f := range failures {
					failed = append(failed, newPolicyFailure(st.p.Name, st.inv.binding.name, f, metav1.StatusReasonInvalid))
				}
			}
			return ran, ch, err
		}})
	}
	for _, h := range hooks {
		mutators = append(mutators, mutator{h.reinvoke, false, func() (bool, bool, error) { return r.mutateByHook(ctx, h) }})
	}
	// Runs and changes are numbered in the order they happen: a mutator is reinvoked when the
	// last change came after its last run.
	changed := false
	seq, lastChange := 0, 0
	lastRun := make([]int, len(mutators))
	run := func(i int) error {
		did, ch, err := mutators[i].run()
		if err != nil || !did {
			return err
		}
		seq++
		lastRun[i] = seq
		if ch {
			changed, lastChange = true, seq
		}
		return nil
	}
	// pass runs the mutators that want picks; policies that fail closed stop it before the
	// webhooks, as a failed admission plugin stops Kubernetes' chain.
	pass := func(want func(i int) bool) error {
		for i, m := range mutators {
			if !m.policy && len(failed) > 0 {
				break
			}
			if want(i) {
				if err := run(i); err != nil {
					return err
				}
			}
		}
		return r.policiesFailed(failed)
	}
	if err := pass(func(int) bool { return true }); err != nil || lastChange == 0 {
		return changed, err
	}
	ranFirst := slices.Clone(lastRun)
	return changed, pass(func(i int) bool {
		return mutators[i].reinvoke && ranFirst[i] > 0 && lastChange > lastRun[i]
	})
}

// mutateByHook calls one mutating webhook and applies its patch.
func (r *Request) mutateByHook(ctx context.Context, h *Hook) (ran, changed bool, err error) {
	view, version, err := r.matches(ctx, h)
	if err != nil || view == nil {
		return false, false, err
	}
	if err := r.dryRunSafe(h); err != nil {
		return false, false, err
	}
	resp, err := r.call(ctx, h, view, true)
	if err != nil {
		return true, false, fail(h, err)
	}
	if !resp.Allowed {
		return true, false, denied(h, resp.Result)
	}
	if len(resp.Patch) == 0 {
		return true, false, nil
	}
	if r.Object == nil {
		return true, false, apierrors.NewInternalError(fmt.Errorf("admission webhook %q attempted to modify the object, which is not supported for this operation", h.Name))
	}
	mutated, diff, err := applyPatch(view.Object, resp.Patch)
	if err != nil {
		return true, false, apierrors.NewInternalError(fmt.Errorf("admission webhook %q returned an invalid patch: %v", h.Name, err))
	}
	if !diff {
		return true, false, nil
	}
	if version != nil {
		if mutated, err = version.From(ctx, mutated); err != nil {
			return true, false, apierrors.NewInternalError(err)
		}
	}
	r.Object, r.vars = mutated, nil
	return true, true, nil
}

// applyPatch applies a JSON patch to obj and decodes the result as obj's type.
func applyPatch(obj runtime.Object, patch []byte) (runtime.Object, bool, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, false, err
	}
	cur, err := json.Marshal(obj)
	if err != nil {
		return nil, false, err
	}
	next, err := p.Apply(cur)
	if err != nil {
		return nil, false, err
	}
	if jsonpatch.Equal(cur, next) {
		return obj, false, nil
	}
	out := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(next, out); err != nil {
		return nil, false, err
	}
	out.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return out, true, nil
}
