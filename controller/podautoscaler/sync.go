package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/reconcile"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// sync looks at one HPA and asks to look again a sync period later.
func (c *Controller) sync(ctx context.Context, key string) (reconcile.Result, error) {
	ns, name, err := cache.SplitKey(key)
	if err != nil {
		return reconcile.Result{}, nil // not a key of ours: retrying will not mend it
	}
	cached, err := c.hpas.Lister().Namespace(ns).Get(name)
	if client.IsNotFound(err) {
		c.history.forget(key)
		c.selectors.forget(key)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// An error is retried a sync period later too (fixedInterval); returning it counts the
	// sync as failed.
	return reconcile.After(c.o.SyncPeriod), c.reconcile(ctx, key, cached.DeepCopy())
}

// reconcile computes and writes hpa's target's count and hpa's status.
func (c *Controller) reconcile(ctx context.Context, key string, hpa *autoscalingv2.HorizontalPodAutoscaler) (retErr error) {
	before := hpa.Status.DeepCopy()
	ref := hpa.Spec.ScaleTargetRef
	reference := fmt.Sprintf("%s/%s/%s", ref.Kind, hpa.Namespace, ref.Name)

	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		c.failedGetScale(ctx, hpa, before, err)
		return fmt.Errorf("invalid API version in scale target reference: %v", err)
	}
	target, err := c.scales.resolve(ctx, schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
	if err != nil {
		c.failedGetScale(ctx, hpa, before, err)
		return fmt.Errorf("unable to determine resource for scale target reference: %v", err)
	}
	scale, err := c.scales.get(ctx, target, hpa.Namespace, ref.Name)
	if err != nil {
		c.failedGetScale(ctx, hpa, before, err)
		return fmt.Errorf("failed to query scale subresource for %s: %v", reference, err)
	}
	c.setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale", "the HPA controller was able to get the target's current scale")
	current := scale.Spec.Replicas
	c.history.start(key, current, c.now())

	minReplicas := deref(hpa.Spec.MinReplicas, 1)
	var (
		desired  int32
		reason   string
		statuses []autoscalingv2.MetricStatus
	)
	rescale, measure := true, true
	switch {
	case current == 0:
		// Scaled to zero by hand: the autoscaler stays out of it until someone scales it up.
		desired, rescale, measure = 0, false, false
		c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled", "scaling is disabled since the replica count of the target is zero")
		removeCondition(hpa, autoscalingv2.ScaledToZero)
	case current > hpa.Spec.MaxReplicas:
		reason, desired, measure = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.MaxReplicas, false
	case current < minReplicas:
		reason, desired, measure = "Current number of replicas below Spec.MinReplicas", minReplicas, false
	}
	if measure {
		proposed, metric, st, err := c.replicasForMetrics(ctx, key, hpa, scale)
		statuses = st
		if err != nil && proposed == -1 {
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false)
			c.writeStatus(ctx, hpa, before)
			c.event(hpa, corev1.EventTypeWarning, "FailedComputeMetricsReplicas", err.Error())
			return fmt.Errorf("failed to compute desired number of replicas based on listed metrics for %s: %v", reference, err)
		}
		// Some metrics failed but the others ask for more pods: scale on them, and report
		// the failure at the end.
		retErr = err
		if proposed > desired {
			desired = proposed
		} else {
			metric = ""
		}
		switch {
		case desired > current:
			reason = metric + " above target"
		case desired < current:
			reason = "All metrics below target"
		}
		n := c.history.normalize(key, hpa.Spec.Behavior, current, desired, minReplicas, hpa.Spec.MaxReplicas, c.now())
		c.setCondition(hpa, autoscalingv2.AbleToScale, n.able.status, n.able.reason, n.able.message)
		c.setCondition(hpa, autoscalingv2.ScalingLimited, n.limited.status, n.limited.reason, n.limited.message)
		desired = n.replicas
		rescale = desired != current
	}

	if rescale {
		if err := c.writeScale(ctx, target, scale, desired); err != nil {
			c.event(hpa, corev1.EventTypeWarning, "FailedRescale", fmt.Sprintf("New size: %d; reason: %s; error: %v", desired, reason, err))
			c.setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedUpdateScale", "the HPA controller was unable to update the target scale: "+err.Error())
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false)
			c.writeStatus(ctx, hpa, before)
			return fmt.Errorf("failed to rescale %s: %v", reference, err)
		}
		c.setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale", fmt.Sprintf("the HPA controller was able to update the target scale to %d", desired))
		c.event(hpa, corev1.EventTypeNormal, "SuccessfulRescale", fmt.Sprintf("New size: %d; reason: %s", desired, reason))
		c.history.recordScale(key, hpa.Spec.Behavior, current, desired, c.now())
		removeCondition(hpa, autoscalingv2.ScaledToZero)
		slog.Info("rescaled", "controller", Name, "hpa", key, "target", reference, "from", current, "to", desired, "reason", reason)
	} else {
		desired = current
	}
	c.setStatus(hpa, current, desired, statuses, rescale)
	if err := c.writeStatus(ctx, hpa, before); err != nil {
		return err
	}
	return retErr
}

// failedGetScale reports that the target's scale could not be read.
func (c *Controller) failedGetScale(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, before *autoscalingv2.HorizontalPodAutoscalerStatus, err error) {
	c.event(hpa, corev1.EventTypeWarning, "FailedGetScale", err.Error())
	c.setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale", "the HPA controller was unable to get the target's current scale: "+err.Error())
	c.writeStatus(ctx, hpa, before)
}

// writeScale sets the target's count, reading the scale again after a conflict (someone else
// changed the target meanwhile) up to a few times.
func (c *Controller) writeScale(ctx context.Context, target scaleTarget, scale *autoscalingv1.Scale, replicas int32) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		scale.Spec.Replicas = replicas
		if _, err = c.scales.update(ctx, target, scale); err == nil || !client.IsConflict(err) {
			return err
		}
		if latest, gerr := c.scales.get(ctx, target, scale.Namespace, scale.Name); gerr == nil {
			scale = latest
		}
	}
	return err
}

// setStatus rebuilds the status from this sync's figures, keeping the conditions and the last
// scale time (now, if this sync scaled).
func (c *Controller) setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32, metrics []autoscalingv2.MetricStatus, rescaled bool) {
	last := hpa.Status.LastScaleTime
	if rescaled {
		last = &metav1.Time{Time: c.now()}
	}
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current, DesiredReplicas: desired, LastScaleTime: last,
		CurrentMetrics: metrics, Conditions: hpa.Status.Conditions}
}

// writeStatus writes hpa's status when it differs from before.
func (c *Controller) writeStatus(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, before *autoscalingv2.HorizontalPodAutoscalerStatus) error {
	if apiequality.Semantic.DeepEqual(before, &hpa.Status) {
		return nil
	}
	api := client.Resource[*autoscalingv2.HorizontalPodAutoscaler](c.client, "horizontalpodautoscalers").Namespace(hpa.Namespace)
	_, err := api.UpdateStatus(ctx, hpa)
	// On a conflict the HPA changed since the cache showed it (kubectl apply while this sync
	// ran). A changed spec has its own sync queued, whose status is the one to write: this
	// one is stale. Otherwise (labels, another writer), this status still holds: write it
	// over the fresh object rather than waiting a sync period. The fresh object can change
	// again before that write, so the check repeats a few times.
	for attempt := 0; attempt < 5 && client.IsConflict(err); attempt++ {
		fresh, gerr := api.Get(ctx, hpa.Name)
		if gerr != nil {
			err = gerr
			break
		}
		if fresh.Generation != hpa.Generation {
			return nil
		}
		fresh.Status = hpa.Status
		_, err = api.UpdateStatus(ctx, fresh)
	}
	if err != nil {
		c.event(hpa, corev1.EventTypeWarning, "FailedUpdateStatus", err.Error())
		return fmt.Errorf("failed to update status for %s: %v", hpa.Name, err)
	}
	return nil
}

func (c *Controller) event(hpa *autoscalingv2.HorizontalPodAutoscaler, typ, reason, message string) {
	c.recorder.Eventf(hpa, typ, reason, "%s", message)
}

// setCondition sets a condition, its transition time moving only when its status changes.
func (c *Controller) setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType,
	status corev1.ConditionStatus, reason, message string) {
	conds := hpa.Status.Conditions
	i := slices.IndexFunc(conds, func(cd autoscalingv2.HorizontalPodAutoscalerCondition) bool { return cd.Type == typ })
	if i < 0 {
		conds = append(conds, autoscalingv2.HorizontalPodAutoscalerCondition{Type: typ})
		i = len(conds) - 1
	}
	if conds[i].Status != status {
		conds[i].LastTransitionTime = metav1.Time{Time: c.now()}
	}
	conds[i].Status, conds[i].Reason, conds[i].Message = status, reason, message
	hpa.Status.Conditions = conds
}

func removeCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, typ autoscalingv2.HorizontalPodAutoscalerConditionType) {
	hpa.Status.Conditions = slices.DeleteFunc(hpa.Status.Conditions, func(cd autoscalingv2.HorizontalPodAutoscalerCondition) bool { return cd.Type == typ })
}

// failedMetric is a metric that could not be turned into a count: the reason and cause (err)
// of the ScalingActive condition to set if it decides the outcome, and the error to report
// (wrapped, naming the metric).
type failedMetric struct {
	reason     string
	err, outer error
}

// syncData is what one sync reads once for all of an HPA's metrics: its pods, and their usage
// from the metrics API (read on first need).
type syncData struct {
	namespace string
	selector  labels.Selector
	pods      []*corev1.Pod
	fetched   bool
	usage     []metricsv1beta1.PodMetrics
	fetchErr  error
}

// replicasForMetrics computes the count each metric asks for and returns the highest, the
// metric that asked for it and every metric's status. When every metric failed, or some
// failed and the others would scale down (the failed ones might have wanted more), it
// returns -1 and sets ScalingActive from the first failure; when some failed but the count
// rises, it returns the count and the error.
func (c *Controller) replicasForMetrics(ctx context.Context, key string, hpa *autoscalingv2.HorizontalPodAutoscaler, scale *autoscalingv1.Scale) (int32, string, []autoscalingv2.MetricStatus, error) {
	selector, err := c.validSelector(key, hpa, scale.Status.Selector)
	if err != nil {
		return -1, "", nil, err
	}
	d := &syncData{namespace: hpa.Namespace, selector: selector, pods: c.pods.Lister().Namespace(hpa.Namespace).List(selector)}
	specs := hpa.Spec.Metrics
	statuses := make([]autoscalingv2.MetricStatus, len(specs))
	var (
		replicas int32
		metric   string
		invalid  int
		first    failedMetric
	)
	for i, spec := range specs {
		proposal, name, failed := c.replicasForMetric(ctx, hpa, spec, scale, d, &statuses[i])
		if failed != nil {
			if invalid == 0 {
				first = *failed
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	var errOut error
	if invalid > 0 {
		errOut = fmt.Errorf("invalid metrics (%d invalid out of %d), first error is: %v", invalid, len(specs), first.outer)
	}
	if len(specs) == 0 {
		c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidMetricSourceType", "the HPA has no metrics to compute a replica count from")
		return -1, "", statuses, errors.New("no metrics")
	}
	if invalid >= len(specs) || (invalid > 0 && replicas < scale.Spec.Replicas) {
		c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, first.reason, "the HPA was unable to compute the replica count: "+first.err.Error())
		return -1, "", statuses, errOut
	}
	c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from "+metric)
	return replicas, metric, statuses, errOut
}

// validSelector parses the scale's selector and checks that no other HPA selects any of the
// same pods; it sets ScalingActive when either fails.
func (c *Controller) validSelector(key string, hpa *autoscalingv2.HorizontalPodAutoscaler, selector string) (labels.Selector, error) {
	if selector == "" {
		c.event(hpa, corev1.EventTypeWarning, "SelectorRequired", "selector is required")
		c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "the HPA target's scale is missing a selector")
		return nil, errors.New("selector is required")
	}
	parsed, err := labels.Parse(selector)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.event(hpa, corev1.EventTypeWarning, "InvalidSelector", msg)
		c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", msg)
		return nil, errors.New(msg)
	}
	c.selectors.put(key, hpa.Namespace, parsed)
	pods := c.pods.Lister().Namespace(hpa.Namespace).List(parsed)
	if owners := c.selectors.selecting(hpa.Namespace, pods); len(owners) > 1 {
		msg := fmt.Sprintf("pods by selector %v are controlled by multiple HPAs: [%s]", selector, strings.Join(owners, " "))
		c.event(hpa, corev1.EventTypeWarning, "AmbiguousSelector", msg)
		c.setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector", msg)
		return nil, errors.New(msg)
	}
	return parsed, nil
}

// notServed is why Pods, Object and External metrics fail: they come from APIs kplane does
// not serve.
func notServed(api string) error {
	return fmt.Errorf("the %s API is not served: kplane's horizontal pod autoscaler reads only the resource metrics API (metrics.k8s.io)", api)
}

// replicasForMetric computes the count one metric asks for and fills its status; a metric that
// fails records its event and returns why.
func (c *Controller) replicasForMetric(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec,
	scale *autoscalingv1.Scale, d *syncData, status *autoscalingv2.MetricStatus) (int32, string, *failedMetric) {
	fail := func(reason string, inner, outer error) (int32, string, *failedMetric) {
		c.event(hpa, corev1.EventTypeWarning, reason, inner.Error())
		return 0, "", &failedMetric{reason: reason, err: inner, outer: outer}
	}
	switch {
	case spec.Type == autoscalingv2.ResourceMetricSourceType && spec.Resource != nil:
		r := spec.Resource
		n, cur, name, err := c.resourceReplicas(ctx, hpa, scale.Spec.Replicas, r.Name, r.Target, "", d)
		if err != nil {
			return fail("FailedGetResourceMetric", err, fmt.Errorf("failed to get %s resource metric value: %v", r.Name, err))
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, Resource: &autoscalingv2.ResourceMetricStatus{Name: r.Name, Current: *cur}}
		return n, name, nil
	case spec.Type == autoscalingv2.ContainerResourceMetricSourceType && spec.ContainerResource != nil:
		r := spec.ContainerResource
		n, cur, name, err := c.resourceReplicas(ctx, hpa, scale.Spec.Replicas, r.Name, r.Target, r.Container, d)
		if err != nil {
			return fail("FailedGetContainerResourceMetric", err, fmt.Errorf("failed to get %s container metric value: %v", r.Container, err))
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: r.Name, Container: r.Container, Current: *cur}}
		return n, name, nil
	case spec.Type == autoscalingv2.PodsMetricSourceType && spec.Pods != nil:
		err := fmt.Errorf("unable to get metric %s: %w", spec.Pods.Metric.Name, notServed("custom metrics (custom.metrics.k8s.io)"))
		return fail("FailedGetPodsMetric", err, fmt.Errorf("failed to get pods metric value: %v", err))
	case spec.Type == autoscalingv2.ObjectMetricSourceType && spec.Object != nil:
		o := spec.Object
		err := fmt.Errorf("unable to get metric %s of %s %s/%s: %w", o.Metric.Name, o.DescribedObject.Kind, hpa.Namespace, o.DescribedObject.Name,
			notServed("custom metrics (custom.metrics.k8s.io)"))
		return fail("FailedGetObjectMetric", err, fmt.Errorf("failed to get object metric value: %v", err))
	case spec.Type == autoscalingv2.ExternalMetricSourceType && spec.External != nil:
		err := fmt.Errorf("unable to get external metric %s/%s: %w", hpa.Namespace, spec.External.Metric.Name, notServed("external metrics (external.metrics.k8s.io)"))
		return fail("FailedGetExternalMetric", err, fmt.Errorf("failed to get %s external metric value: %v", spec.External.Metric.Name, err))
	}
	// The API refuses such metrics; one stored by an older or other server gets here.
	err := fmt.Errorf("unknown metric source type %q", spec.Type)
	return fail("InvalidMetricSourceType", err, err)
}

// resourceReplicas is the proposal of a Resource (container "") or ContainerResource metric,
// with the metric's current value and its description for the ScalingActive condition and the
// rescale reason.
func (c *Controller) resourceReplicas(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, current int32, resourceName corev1.ResourceName,
	target autoscalingv2.MetricTarget, container string, d *syncData) (int32, *autoscalingv2.MetricValueStatus, string, error) {
	if target.AverageValue == nil && target.AverageUtilization == nil {
		return 0, nil, "", errors.New("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set")
	}
	usage, err := c.usage(ctx, d, resourceName, container)
	tol := c.tolerances(hpa)
	r := readiness{now: c.now(), cpuInitialization: c.o.CPUInitializationPeriod, readinessDelay: c.o.InitialReadinessDelay}
	if target.AverageValue != nil {
		if err != nil {
			return 0, nil, "", fmt.Errorf("failed to get %s usage: %v", resourceName, err)
		}
		n, average, err := averageValueReplicas(current, target.AverageValue.MilliValue(), d.pods, usage, resourceName, tol, r)
		if err != nil {
			return 0, nil, "", fmt.Errorf("failed to get %s usage: %v", resourceName, err)
		}
		q := quantityOf(resourceName, average)
		return n, &autoscalingv2.MetricValueStatus{AverageValue: &q}, fmt.Sprintf("%s resource", resourceName), nil
	}
	if err != nil {
		return 0, nil, "", fmt.Errorf("failed to get %s utilization: %v", resourceName, err)
	}
	n, utilization, average, err := utilizationReplicas(current, *target.AverageUtilization, d.pods, usage, resourceName, container, tol, r)
	if err != nil {
		return 0, nil, "", fmt.Errorf("failed to get %s utilization: %v", resourceName, err)
	}
	q := quantityOf(resourceName, average)
	name := fmt.Sprintf("%s resource utilization (percentage of request)", resourceName)
	if container != "" {
		name = fmt.Sprintf("%s container resource utilization (percentage of request)", resourceName)
	}
	return n, &autoscalingv2.MetricValueStatus{AverageUtilization: &utilization, AverageValue: &q}, name, nil
}

// usage reads the pods' usage of a resource, from the metrics API the first time a sync needs it.
func (c *Controller) usage(ctx context.Context, d *syncData, resourceName corev1.ResourceName, container string) (podMetrics, error) {
	if !d.fetched {
		d.fetched = true
		d.usage, d.fetchErr = c.metrics.PodMetrics(ctx, d.namespace, d.selector)
		if d.fetchErr != nil {
			d.fetchErr = fmt.Errorf("unable to fetch metrics from resource metrics API: %v", d.fetchErr)
		} else if len(d.usage) == 0 {
			d.fetchErr = errNoMetricsReturned
		}
	}
	if d.fetchErr != nil {
		return nil, fmt.Errorf("unable to get metrics for resource %s: %v", resourceName, d.fetchErr)
	}
	return resourceUsage(d.usage, resourceName, container), nil
}

// quantityOf renders a usage in milli-units as the metrics API shows that resource: memory in
// binary units, the rest in decimal ones.
func quantityOf(name corev1.ResourceName, milli int64) resource.Quantity {
	format := resource.DecimalSI
	if name == corev1.ResourceMemory {
		format = resource.BinarySI
	}
	return *resource.NewMilliQuantity(milli, format)
}

// tolerances are the controller's, or the behavior's where it sets them.
func (c *Controller) tolerances(hpa *autoscalingv2.HorizontalPodAutoscaler) tolerances {
	t := tolerances{down: c.o.Tolerance, up: c.o.Tolerance}
	if b := hpa.Spec.Behavior; b != nil {
		if b.ScaleDown != nil && b.ScaleDown.Tolerance != nil {
			t.down = b.ScaleDown.Tolerance.AsApproximateFloat64()
		}
		if b.ScaleUp != nil && b.ScaleUp.Tolerance != nil {
			t.up = b.ScaleUp.Tolerance.AsApproximateFloat64()
		}
	}
	return t
}

// selectorIndex remembers the pod selector each HPA's target had at its last sync, to find
// pods that more than one HPA would scale.
type selectorIndex struct {
	mu    sync.Mutex
	byKey map[string]selectorOf
}

type selectorOf struct {
	namespace string
	selector  labels.Selector
}

func (s *selectorIndex) put(key, ns string, sel labels.Selector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byKey[key] = selectorOf{ns, sel}
}

func (s *selectorIndex) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byKey, key)
}

// selecting lists, sorted, the HPAs of namespace whose selectors select any of pods.
func (s *selectorIndex) selecting(ns string, pods []*corev1.Pod) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for key, so := range s.byKey {
		if so.namespace != ns {
			continue
		}
		if slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return so.selector.Matches(labels.Set(p.Labels)) }) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}
