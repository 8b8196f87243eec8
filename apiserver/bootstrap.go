package apiserver

import (
	"context"
	"net"
	"strconv"

	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// bootstrap creates what every Kubernetes cluster has from the start: the system namespaces and
// the kubernetes service in default.
func (s *Server) bootstrap(ctx context.Context) error {
	namespaces := s.resources[namespacesGVR]
	for _, name := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := s.ensure(ctx, namespaces, ns); err != nil {
			return err
		}
	}
	port := int32(443)
	if _, p, err := net.SplitHostPort(s.cfg.ExternalAddress); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			port = int32(n)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(port)}},
		},
	}
	return s.ensure(ctx, s.resources[schema.GroupVersionResource{Version: "v1", Resource: "services"}], svc)
}

func (s *Server) ensure(ctx context.Context, res *resource, obj storage.Object) error {
	if _, err := res.store.Get(ctx, obj.GetNamespace(), obj.GetName()); err == nil {
		return nil
	}
	obj.GetObjectKind().SetGroupVersionKind(res.info.GVK())
	if _, err := s.createPrepared(ctx, res, obj, false); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
