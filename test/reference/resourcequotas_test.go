//go:build linux

package reference

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kplane/kplane/client"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestResourceQuotasMatchReference runs the reference kube-controller-manager's resourcequota
// controller and then kplane's on the same namespace contents and ResourceQuotas (object counts,
// compute requests and limits, the BestEffort and NotTerminating scopes, a PriorityClass
// scopeSelector), and requires each quota's status.hard and status.used to be the same: after
// the quotas are created over existing objects (the controller's first count), after objects
// are added (charged by kplane's admission, the same for both), deleted and finished (given back
// by the controller's recount), and after a quota's spec changes. Quota admission is kplane's
// apiserver's in both runs: what is compared is the controller's computation.
//
//	KPLANE_REFERENCE_KCM=/path/to/kube-controller-manager go test -count=1 -v -run TestResourceQuotasMatchReference ./test/reference/
func TestResourceQuotasMatchReference(t *testing.T) {
	runDifferential(t, scenario{
		prefix:      "quota",
		controllers: "resourcequota",
		steps: []step{
			{name: "creating the quotas over existing objects", act: createQuotaFixture, atRest: quotasAtRest},
			{name: "adding, deleting and finishing objects", act: changeQuotaObjects, atRest: quotasAtRest},
			{name: "changing a quota's spec", act: changeQuotaSpec, atRest: quotasAtRest},
		},
		outcomes: quotaOutcomes,
		retire:   deleteAll[*corev1.ResourceQuota]("resourcequotas"),
	})
}

func quotaFixture() []*corev1.ResourceQuota {
	q := func(name string, hard map[corev1.ResourceName]string, change func(*corev1.ResourceQuota)) *corev1.ResourceQuota {
		rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: resources(hard)}}
		if change != nil {
			change(rq)
		}
		return rq
	}
	return []*corev1.ResourceQuota{
		q("counts", map[corev1.ResourceName]string{"pods": "20", "services": "10", "configmaps": "10", "count/jobs.batch": "5",
			"services.nodeports": "5", "services.loadbalancers": "5", "secrets": "10", "count/configmaps": "10"}, nil),
		// Compute quotas require every pod they count to say what they count: the best-effort
		// pods are left out by scope.
		q("compute", map[corev1.ResourceName]string{"requests.cpu": "10", "requests.memory": "10Gi", "limits.cpu": "20",
			"limits.memory": "20Gi", "cpu": "10", "memory": "10Gi"}, func(rq *corev1.ResourceQuota) {
			rq.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort}
		}),
		q("besteffort", map[corev1.ResourceName]string{"pods": "10"}, func(rq *corev1.ResourceQuota) {
			rq.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}
		}),
		q("notterminating", map[corev1.ResourceName]string{"pods": "10", "requests.cpu": "10", "limits.memory": "10Gi"}, func(rq *corev1.ResourceQuota) {
			rq.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating, corev1.ResourceQuotaScopeNotBestEffort}
		}),
		q("terminating", map[corev1.ResourceName]string{"pods": "10", "requests.cpu": "10"}, func(rq *corev1.ResourceQuota) {
			rq.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotBestEffort}
		}),
		q("priority", map[corev1.ResourceName]string{"pods": "10", "requests.cpu": "10"}, func(rq *corev1.ResourceQuota) {
			rq.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}
		}),
	}
}

func resources(m map[corev1.ResourceName]string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range m {
		out[k] = resource.MustParse(v)
	}
	return out
}

// quotaPod is a pod with a container of the given requests and limits of cpu and memory (none
// for "").
func quotaPod(name, requestCPU, requestMemory, limitCPU, limitMemory string, change func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	list := func(cpu, memory string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			l[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		return l
	}
	if requestCPU+requestMemory != "" {
		p.Spec.Containers[0].Resources.Requests = list(requestCPU, requestMemory)
	}
	if limitCPU+limitMemory != "" {
		p.Spec.Containers[0].Resources.Limits = list(limitCPU, limitMemory)
	}
	if change != nil {
		change(p)
	}
	return p
}

// quotaObjects are the objects present before the quotas, and added after them.
func quotaObjects(second bool) (pods []*corev1.Pod, services []*corev1.Service, configMaps []*corev1.ConfigMap, jobs []*batchv1.Job) {
	suffix := map[bool]string{false: "1", true: "2"}[second]
	pods = []*corev1.Pod{
		quotaPod("besteffort-"+suffix, "", "", "", "", nil),
		quotaPod("burstable-"+suffix, "500m", "128Mi", "1", "256Mi", nil),
		// Limits only: the requests default to them.
		quotaPod("guaranteed-"+suffix, "", "", "1", "1Gi", nil),
		quotaPod("terminating-"+suffix, "250m", "64Mi", "500m", "0.5Gi", func(p *corev1.Pod) {
			p.Spec.ActiveDeadlineSeconds = new(int64(600))
		}),
		quotaPod("high-"+suffix, "100m", "100M", "1500m", "1G", func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }),
		quotaPod("finishing-"+suffix, "2", "1Gi", "2", "2Gi", nil),
	}
	svc := func(name string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + suffix}, Spec: corev1.ServiceSpec{Type: typ,
			Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	services = []*corev1.Service{svc("clusterip", corev1.ServiceTypeClusterIP), svc("nodeport", corev1.ServiceTypeNodePort), svc("lb", corev1.ServiceTypeLoadBalancer)}
	for _, n := range []string{"a", "b"} {
		configMaps = append(configMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + n + "-" + suffix}})
	}
	jobs = []*batchv1.Job{{ObjectMeta: metav1.ObjectMeta{Name: "job-" + suffix}, Spec: batchv1.JobSpec{Suspend: new(true),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}}}
	return pods, services, configMaps, jobs
}

func createQuotaObjects(ctx context.Context, c *client.Client, ns string, second bool) error {
	pods, services, configMaps, jobs := quotaObjects(second)
	if err := createAll(ctx, c, "pods", ns, pods); err != nil {
		return err
	}
	if err := createAll(ctx, c, "services", ns, services); err != nil {
		return err
	}
	if err := createAll(ctx, c, "configmaps", ns, configMaps); err != nil {
		return err
	}
	return createAll(ctx, c, "jobs", ns, jobs)
}

func createQuotaFixture(ctx context.Context, c *client.Client, ns string) error {
	if err := createQuotaObjects(ctx, c, ns, false); err != nil {
		return err
	}
	return createAll(ctx, c, "resourcequotas", ns, quotaFixture())
}

// changeQuotaObjects adds the second set of objects (admission charges them), then deletes
// some of the first and lets a pod of each set finish (the controller gives back what they
// were charged).
func changeQuotaObjects(ctx context.Context, c *client.Client, ns string) error {
	if err := createQuotaObjects(ctx, c, ns, true); err != nil {
		return err
	}
	for _, del := range []struct{ resource, name string }{
		{"pods", "guaranteed-1"}, {"pods", "besteffort-1"}, {"services", "lb-1"}, {"configmaps", "cm-a-1"}, {"jobs", "job-1"},
	} {
		var err error
		switch del.resource {
		case "pods":
			err = client.Resource[*corev1.Pod](c, "pods").Namespace(ns).Delete(ctx, del.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		case "services":
			err = client.Resource[*corev1.Service](c, "services").Namespace(ns).Delete(ctx, del.name, metav1.DeleteOptions{})
		case "configmaps":
			err = client.Resource[*corev1.ConfigMap](c, "configmaps").Namespace(ns).Delete(ctx, del.name, metav1.DeleteOptions{})
		case "jobs":
			err = client.Resource[*batchv1.Job](c, "jobs").Namespace(ns).Delete(ctx, del.name, metav1.DeleteOptions{})
		}
		if err != nil {
			return fmt.Errorf("deleting %s %s: %w", del.resource, del.name, err)
		}
	}
	pods := client.Resource[*corev1.Pod](c, "pods").Namespace(ns)
	for _, name := range []string{"finishing-1", "finishing-2"} {
		p, err := pods.Get(ctx, name)
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodSucceeded
		if _, err := pods.UpdateStatus(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// changeQuotaSpec adds resources to a quota and removes one.
func changeQuotaSpec(ctx context.Context, c *client.Client, ns string) error {
	return modify(ctx, client.Resource[*corev1.ResourceQuota](c, "resourcequotas").Namespace(ns), "compute", func(rq *corev1.ResourceQuota) {
		delete(rq.Spec.Hard, "cpu")
		rq.Spec.Hard["pods"] = resource.MustParse("15")
		rq.Spec.Hard["count/services"] = resource.MustParse("15")
	})
}

// quotasAtRest: each quota's status has the resources of its spec, all with a usage.
func quotasAtRest(ctx context.Context, c *client.Client, ns string) ([]string, error) {
	l, err := list[*corev1.ResourceQuota](ctx, c, "resourcequotas", ns)
	if err != nil {
		return nil, err
	}
	var moving []string
	for _, rq := range l {
		done := len(rq.Status.Hard) == len(rq.Spec.Hard) && len(rq.Status.Used) == len(rq.Spec.Hard)
		for name, q := range rq.Spec.Hard {
			h, ok := rq.Status.Hard[name]
			_, used := rq.Status.Used[name]
			done = done && ok && h.Cmp(q) == 0 && used
		}
		if !done {
			moving = append(moving, rq.Name)
		}
	}
	return moving, nil
}

// quotaOutcomes renders each quota's status.hard and status.used, quantities by value: the
// format a sum is written in is its first non-zero term's (resource.Quantity.Add), and the
// reference sums pods in its informer's order, a map's, so one reference run may write
// 4684354560 where the next writes 4574565Ki; kplane's too may pick either.
func quotaOutcomes(ctx context.Context, c *client.Client, ns string) (map[string]string, error) {
	l, err := list[*corev1.ResourceQuota](ctx, c, "resourcequotas", ns)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, rq := range l {
		out["quota "+rq.Name] = fmt.Sprintf("hard=%s used=%s", resourceString(rq.Status.Hard), resourceString(rq.Status.Used))
	}
	return out, nil
}

func resourceString(l corev1.ResourceList) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		q := l[k]
		v := strconv.FormatInt(q.Value(), 10)
		if m := q.MilliValue(); m%1000 != 0 {
			v = strconv.FormatInt(m, 10) + "m"
		}
		parts = append(parts, fmt.Sprintf("%s=%s", k, v))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
