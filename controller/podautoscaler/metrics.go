package podautoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// MetricsSource is where the controller reads the pods' resource usage. In production it is
// the resource metrics API, metrics.k8s.io, through the apiserver (which computes it from the
// node agents, or, against Kubernetes, metrics-server behind it); tests put a source of their
// own in its place.
type MetricsSource interface {
	// PodMetrics returns the usage of the pods of namespace that selector selects, as the
	// resource metrics API lists it (pods without usage to show are left out).
	PodMetrics(ctx context.Context, namespace string, selector labels.Selector) ([]metricsv1beta1.PodMetrics, error)
}

// resourceMetricsAPI reads metrics.k8s.io/v1beta1 pods.
type resourceMetricsAPI struct{ client *client.Client }

// PodMetrics implements MetricsSource.
func (m resourceMetricsAPI) PodMetrics(ctx context.Context, namespace string, selector labels.Selector) ([]metricsv1beta1.PodMetrics, error) {
	path := "/apis/" + metricsv1beta1.SchemeGroupVersion.String() + "/namespaces/" + url.PathEscape(namespace) + "/pods"
	data, err := m.client.Raw(ctx, http.MethodGet, path, url.Values{"labelSelector": {selector.String()}}, nil)
	if err != nil {
		return nil, err
	}
	var list metricsv1beta1.PodMetricsList
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return list.Items, nil
}

var errNoMetricsReturned = errors.New("no metrics returned from resource metrics API")

// resourceUsage turns the API's pod metrics into one resource's usage per pod: container's,
// when one is named, else the sum over the pod's containers. A pod without a figure for the
// resource (in every container, or in the one named) is left out: it counts as missing.
func resourceUsage(items []metricsv1beta1.PodMetrics, resource corev1.ResourceName, container string) podMetrics {
	out := make(podMetrics, len(items))
	for _, m := range items {
		var sum int64
		ok := len(m.Containers) > 0
		found := false
		for _, c := range m.Containers {
			if container != "" && c.Name != container {
				continue
			}
			found = true
			q, has := c.Usage[resource]
			if !has {
				ok = false
				break
			}
			sum += q.MilliValue()
		}
		if ok && (container == "" || found) {
			out[m.Name] = podMetric{value: sum, timestamp: m.Timestamp.Time, window: m.Window.Duration}
		}
	}
	return out
}
