package apiserver

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// The resource metrics API, metrics.k8s.io/v1beta1, served here as metrics-server serves it
// (its objects, tables, selectors, errors), so that `kubectl top` and autoscalers need
// nothing else installed. Objects are computed on request from the nodes (metricsource.go),
// never stored.
var (
	metricsGV    = metricsv1beta1.SchemeGroupVersion
	nodeMetricGR = metricsGV.WithResource("nodes").GroupResource()
	podMetricGR  = metricsGV.WithResource("pods").GroupResource()
)

func init() {
	utilruntime.Must(metricsv1beta1.AddToScheme(registry.Scheme))
}

// metricsResources is the group version's discovery, metrics-server's.
var metricsResources = []metav1.APIResource{
	{Name: "nodes", Kind: "NodeMetrics", Verbs: metav1.Verbs{"get", "list"}},
	{Name: "pods", Namespaced: true, Kind: "PodMetrics", Verbs: metav1.Verbs{"get", "list"}},
}

// serveMetrics answers /apis/metrics.k8s.io/v1beta1/nodes[/<name>] and
// [namespaces/<ns>/]pods[/<name>]; parts are the path after the version and namespace.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, ns string, parts []string, watch bool) {
	var gr schema.GroupResource
	switch parts[0] {
	case "nodes":
		gr = nodeMetricGR
	case "pods":
		gr = podMetricGR
	}
	name := ""
	if len(parts) > 1 {
		name = parts[1]
	}
	switch {
	case gr.Resource == "" || len(parts) > 2 || (gr == nodeMetricGR && ns != ""):
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Group: metricsGV.Group, Resource: strings.Join(parts, "/")}, ""))
		return
	case r.Method != http.MethodGet:
		writeError(w, apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method)))
		return
	case watch:
		writeError(w, apierrors.NewMethodNotSupported(gr, "watch"))
		return
	}
	out, err := negotiate(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var obj runtime.Object
	if gr == nodeMetricGR {
		obj, err = s.nodeMetrics(r, name)
	} else {
		obj, err = s.podMetrics(r, ns, name)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	switch out {
	case outputTable:
		writeObject(w, http.StatusOK, outputJSON, metricsTable(obj))
	case outputPartialMetadata:
		writeObject(w, http.StatusOK, outputJSON, metricsPartialMetadata(obj))
	default:
		writeObject(w, http.StatusOK, out, obj)
	}
}

// nodeMetrics is the NodeMetrics of node name, or (name "") the list of the nodes the
// request's selectors choose that have usage to show.
func (s *Server) nodeMetrics(r *http.Request, name string) (runtime.Object, error) {
	ctx := r.Context()
	nodes := s.resources[nodesGVR]
	var list []*corev1.Node
	if name != "" {
		obj, err := nodes.store.GetCached("", name)
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(nodeMetricGR, name)
		}
		if err != nil {
			return nil, err
		}
		list = []*corev1.Node{obj.(*corev1.Node)}
	} else {
		pred, err := predicate(nodes, r)
		if err != nil {
			return nil, err
		}
		objs, err := nodes.store.List(ctx, "", storage.ListOptions{ResourceVersion: "0", Predicate: pred})
		if err != nil {
			return nil, err
		}
		for _, o := range listItems(objs) {
			list = append(list, o.(*corev1.Node))
		}
	}
	windows := s.sampleNodes(ctx, list)
	items := []metricsv1beta1.NodeMetrics{}
	now := metav1.Now()
	for _, n := range list {
		win, ok := windows[n.Name]
		if !ok {
			continue
		}
		use, at, span, ok := usage(win.cur.node, win.base.node)
		if !ok {
			continue
		}
		items = append(items, metricsv1beta1.NodeMetrics{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: now},
			Timestamp:  metav1.NewTime(at), Window: metav1.Duration{Duration: span.Round(time.Millisecond)}, Usage: use,
		})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	if name != "" {
		if len(items) == 0 {
			return nil, apierrors.NewNotFound(nodeMetricGR, name)
		}
		items[0].TypeMeta = metav1.TypeMeta{APIVersion: metricsGV.String(), Kind: "NodeMetrics"}
		return &items[0], nil
	}
	return &metricsv1beta1.NodeMetricsList{TypeMeta: metav1.TypeMeta{APIVersion: metricsGV.String(), Kind: "NodeMetricsList"}, Items: items}, nil
}

// podMetrics is the PodMetrics of pod ns/name, or (name "") the list of the running pods in
// ns (every namespace when "") the request's selectors choose whose containers all have
// usage to show.
func (s *Server) podMetrics(r *http.Request, ns, name string) (runtime.Object, error) {
	ctx := r.Context()
	pods := s.resources[podsGVR]
	var list []*corev1.Pod
	if name != "" {
		obj, err := pods.store.GetCached(ns, name)
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(podMetricGR, ns+"/"+name)
		}
		if err != nil {
			return nil, err
		}
		list = []*corev1.Pod{obj.(*corev1.Pod)}
	} else {
		pred, err := predicate(pods, r)
		if err != nil {
			return nil, err
		}
		objs, err := pods.store.List(ctx, ns, storage.ListOptions{ResourceVersion: "0", Predicate: pred})
		if err != nil {
			return nil, err
		}
		for _, o := range listItems(objs) {
			list = append(list, o.(*corev1.Pod))
		}
	}
	running := list[:0:0]
	nodeNames := map[string]bool{}
	for _, p := range list {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			running = append(running, p)
			nodeNames[p.Spec.NodeName] = true
		}
	}
	var nodes []*corev1.Node
	for n := range nodeNames {
		if obj, err := s.resources[nodesGVR].store.GetCached("", n); err == nil {
			nodes = append(nodes, obj.(*corev1.Node))
		}
	}
	windows := s.sampleNodes(ctx, nodes)
	items := []metricsv1beta1.PodMetrics{}
	now := metav1.Now()
	for _, p := range running {
		win, ok := windows[p.Spec.NodeName]
		if !ok {
			continue
		}
		if m, ok := podUsage(p, win); ok {
			m.CreationTimestamp = now
			items = append(items, m)
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	if name != "" {
		if len(items) == 0 {
			return nil, apierrors.NewNotFound(podMetricGR, ns+"/"+name)
		}
		items[0].TypeMeta = metav1.TypeMeta{APIVersion: metricsGV.String(), Kind: "PodMetrics"}
		return &items[0], nil
	}
	return &metricsv1beta1.PodMetricsList{TypeMeta: metav1.TypeMeta{APIVersion: metricsGV.String(), Kind: "PodMetricsList"}, Items: items}, nil
}

// podUsage is pod's PodMetrics from its node's window: every container the node reports for
// it must have usage, else there is none, as metrics-server has it; its time and window are
// those of its earliest container sample.
func podUsage(p *corev1.Pod, win window) (metricsv1beta1.PodMetrics, bool) {
	m := metricsv1beta1.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels}}
	var earliest time.Time
	var span time.Duration
	for key, cur := range win.cur.containers {
		if key.namespace != p.Namespace || key.pod != p.Name {
			continue
		}
		use, at, w, ok := usage(cur, win.base.containers[key])
		if !ok {
			return m, false
		}
		m.Containers = append(m.Containers, metricsv1beta1.ContainerMetrics{Name: key.container, Usage: use})
		if earliest.IsZero() || at.Before(earliest) {
			earliest, span = at, w
		}
	}
	if len(m.Containers) == 0 {
		return m, false
	}
	sort.Slice(m.Containers, func(i, j int) bool { return m.Containers[i].Name < m.Containers[j].Name })
	m.Timestamp, m.Window = metav1.NewTime(earliest), metav1.Duration{Duration: span.Round(time.Millisecond)}
	return m, true
}

// sampleNodes samples the nodes at once; a node that cannot be scraped has no window (its
// figures are missing, not an error, as with metrics-server).
func (s *Server) sampleNodes(ctx context.Context, nodes []*corev1.Node) map[string]window {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]window{}
	for _, n := range nodes {
		wg.Go(func() {
			win, err := s.metrics.sample(ctx, n)
			if err != nil {
				if ctx.Err() == nil {
					slog.Info("no resource metrics from node", "node", n.Name, "err", err)
				}
				return
			}
			mu.Lock()
			out[n.Name] = win
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// metricsTable is metrics-server's table of node or pod metrics: the name, each resource's
// usage (a pod's containers summed) and the window.
func metricsTable(obj runtime.Object) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name", Description: "Name of the resource"},
			{Name: "cpu", Type: "string", Format: "quantity"},
			{Name: "memory", Type: "string", Format: "quantity"},
			{Name: "Window", Type: "string", Format: "duration"},
		}, Rows: []metav1.TableRow{}}
	row := func(o storage.Object, use corev1.ResourceList, win metav1.Duration) {
		cpu, mem := use[corev1.ResourceCPU], use[corev1.ResourceMemory]
		r := metav1.TableRow{Cells: []any{o.GetName(), cpu.String(), mem.String(), win.Duration.String()}}
		var buf bytes.Buffer
		if jsonSerializer.Encode(partialMetadata(o), &buf) == nil {
			r.Object = runtime.RawExtension{Raw: bytes.TrimSpace(buf.Bytes())}
		}
		t.Rows = append(t.Rows, r)
	}
	podRow := func(p *metricsv1beta1.PodMetrics) {
		sum := corev1.ResourceList{}
		for _, c := range p.Containers {
			for k, v := range c.Usage {
				q := sum[k]
				q.Add(v)
				sum[k] = q
			}
		}
		row(p, sum, p.Window)
	}
	switch o := obj.(type) {
	case *metricsv1beta1.NodeMetrics:
		row(o, o.Usage, o.Window)
	case *metricsv1beta1.NodeMetricsList:
		for i := range o.Items {
			row(&o.Items[i], o.Items[i].Usage, o.Items[i].Window)
		}
	case *metricsv1beta1.PodMetrics:
		podRow(o)
	case *metricsv1beta1.PodMetricsList:
		for i := range o.Items {
			podRow(&o.Items[i])
		}
	}
	return t
}

// metricsPartialMetadata is obj's metadata only, as PartialObjectMetadata(List).
func metricsPartialMetadata(obj runtime.Object) runtime.Object {
	var items []storage.Object
	switch o := obj.(type) {
	case *metricsv1beta1.NodeMetrics:
		return partialMetadata(o)
	case *metricsv1beta1.PodMetrics:
		return partialMetadata(o)
	case *metricsv1beta1.NodeMetricsList:
		for i := range o.Items {
			items = append(items, &o.Items[i])
		}
	case *metricsv1beta1.PodMetricsList:
		for i := range o.Items {
			items = append(items, &o.Items[i])
		}
	}
	pl := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
	for _, o := range items {
		pl.Items = append(pl.Items, *partialMetadata(o))
	}
	return pl
}
