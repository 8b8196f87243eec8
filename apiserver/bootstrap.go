package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	servicesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	endpointsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "endpoints"}
	endpointSlicesGVR  = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	priorityClassesGVR = schedulingv1.SchemeGroupVersion.WithResource("priorityclasses")
	serviceCIDRsGVR    = networkingv1.SchemeGroupVersion.WithResource("servicecidrs")
	apiServicesGVR     = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	flowSchemasGVR     = flowcontrolv1.SchemeGroupVersion.WithResource("flowschemas")
	priorityLevelsGVR  = flowcontrolv1.SchemeGroupVersion.WithResource("prioritylevelconfigurations")
)

// bootstrap creates what every Kubernetes cluster has from the start: the system namespaces, the
// system priority classes, the default ServiceCIDR and the kubernetes service in default, with Endpoints and an EndpointSlice that point at this
// server, so that in-cluster clients reach it through the service's ClusterIP. The port may
// differ from one start to the next (--secure-port 0): each start writes the current one.
func (s *Server) bootstrap(ctx context.Context) error {
	var objs []ensured
	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		objs = append(objs, ensured{s.resources[namespacesGVR], &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}})
	}
	for _, pc := range registry.SystemPriorityClasses() {
		objs = append(objs, ensured{s.resources[priorityClassesGVR], pc})
	}
	if err := s.ensureAll(ctx, append(s.bootstrapAPIObjects(), objs...)); err != nil {
		return err
	}
	if err := s.ensureDefaultServiceCIDR(ctx); err != nil {
		return err
	}
	host, port := "", int32(443)
	if h, p, err := net.SplitHostPort(s.cfg.ExternalAddress); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			host, port = h, int32(n)
		}
	}
	ports := []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(port)}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
	if err := s.ensure(ctx, s.resources[servicesGVR], svc, func(cur storage.Object) {
		cur.(*corev1.Service).Spec.Ports = ports
	}); err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil {
		slog.Warn("the kubernetes service gets no endpoints: the server's address is not an IP", "address", s.cfg.ExternalAddress)
		return nil
	}
	// Kubernetes' own endpoint reconciler writes both, and marks the Endpoints so that the
	// mirroring controller leaves them alone.
	subsets := []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: ip.String()}},
		Ports:     []corev1.EndpointPort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}},
	}}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
		Subsets:    subsets,
	}
	if err := s.ensure(ctx, s.resources[endpointsGVR], ep, func(cur storage.Object) {
		cur.(*corev1.Endpoints).Subsets = subsets
	}); err != nil {
		return err
	}
	addressType := discoveryv1.AddressTypeIPv4
	if ip.To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	endpoints := []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}}
	slicePorts := []discoveryv1.EndpointPort{{Name: new("https"), Port: new(port), Protocol: new(corev1.ProtocolTCP)}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: addressType,
		Endpoints:   endpoints,
		Ports:       slicePorts,
	}
	return s.ensure(ctx, s.resources[endpointSlicesGVR], slice, func(cur storage.Object) {
		c := cur.(*discoveryv1.EndpointSlice)
		c.AddressType, c.Endpoints, c.Ports = addressType, endpoints, slicePorts
	})
}

// bootstrapAPIObjects lists the API objects kube-apiserver registers at start: a local
// APIService per served group version, and the mandatory FlowSchemas and
// PriorityLevelConfigurations. They are created when missing and otherwise left as they are
// (kube-apiserver too leaves its "onstart" APIServices to their users).
func (s *Server) bootstrapAPIObjects() []ensured {
	var objs []ensured
	for _, gv := range s.groupVersions() {
		objs = append(objs, ensured{s.resources[apiServicesGVR], registry.LocalAPIService(gv)})
	}
	for _, pl := range registry.MandatoryPriorityLevels() {
		objs = append(objs, ensured{s.resources[priorityLevelsGVR], pl})
	}
	for _, fs := range registry.MandatoryFlowSchemas() {
		objs = append(objs, ensured{s.resources[flowSchemasGVR], fs})
	}
	return objs
}

// ensured is an object bootstrap creates when it is missing.
type ensured struct {
	res *resource
	obj storage.Object
}

// ensureAll ensures every object at once: they are independent, and etcd commits concurrent
// writes in shared rounds, where one after another each waits for its own (on a fresh data
// dir, most of the time from start to ready).
func (s *Server) ensureAll(ctx context.Context, objs []ensured) error {
	errs := make([]error, len(objs))
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Go(func() { errs[i] = s.ensure(ctx, o.res, o.obj, nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ensure creates obj when it does not exist; when it does and fix is not nil, fix brings the
// stored object in line (a write that changes nothing is skipped).
func (s *Server) ensure(ctx context.Context, res *resource, obj storage.Object, fix func(cur storage.Object)) error {
	_, err := res.store.Get(ctx, obj.GetNamespace(), obj.GetName())
	switch {
	case err == nil && fix != nil:
		_, err = res.store.Update(ctx, obj.GetNamespace(), obj.GetName(), func(cur storage.Object) (storage.Object, error) {
			fix(cur)
			return cur, nil
		}, res.claims, false)
		return err
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(res.info.GVK())
	if _, err := s.createPrepared(ctx, request{res: res}, obj, false); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// defaultServiceCIDRName is the ServiceCIDR kube-apiserver writes for its --service-cluster-ip-range.
const defaultServiceCIDRName = "kubernetes"

// ensureDefaultServiceCIDR publishes the ClusterIP range as the ServiceCIDR named kubernetes,
// ready, as kube-apiserver does; kplane's allocator draws from the configured range itself.
func (s *Server) ensureDefaultServiceCIDR(ctx context.Context) error {
	alloc := s.cfg.ServiceAllocation
	if alloc == nil || alloc.ClusterIPRange == nil {
		return nil
	}
	res := s.resources[serviceCIDRsGVR]
	cidrs := []string{alloc.ClusterIPRange.String()}
	cidr := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: defaultServiceCIDRName}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	if err := s.ensure(ctx, res, cidr, nil); err != nil {
		return err
	}
	// A new object's status is reset on create: readiness is a second write.
	return s.ensure(ctx, res, cidr, func(cur storage.Object) {
		c := cur.(*networkingv1.ServiceCIDR)
		if meta.IsStatusConditionTrue(c.Status.Conditions, networkingv1.ServiceCIDRConditionReady) {
			return
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: networkingv1.ServiceCIDRConditionReady,
			Status: metav1.ConditionTrue, Reason: "", Message: "Kubernetes default Service CIDR is ready"})
	})
}
