// Package scheme knows the Kubernetes API types kplane serves and speaks, for the API server and
// the client alike.
package scheme

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// Scheme knows every served type (k8s.io/api) plus meta/v1's Status, Table, DeleteOptions and
// WatchEvent, so bodies decode and encode exactly as Kubernetes' do. Programs that use other
// k8s.io/api groups with the client add them here (AddToScheme) before use.
var Scheme = runtime.NewScheme()

// Codecs serializes Scheme's types in JSON, YAML and Kubernetes protobuf.
var Codecs serializer.CodecFactory

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, discoveryv1.AddToScheme, coordinationv1.AddToScheme,
		autoscalingv1.AddToScheme, autoscalingv2.AddToScheme, authenticationv1.AddToScheme, storagev1.AddToScheme, policyv1.AddToScheme,
		apiextv1.AddToScheme, apidiscoveryv2.AddToScheme,
		eventsv1.AddToScheme, networkingv1.AddToScheme, nodev1.AddToScheme, resourcev1.AddToScheme, schedulingv1.AddToScheme,
	} {
		utilruntime.Must(add(Scheme))
	}
	// The groups of APIs no kplane component acts on yet: stored, validated and served only.
	for _, add := range []func(*runtime.Scheme) error{
		rbacv1.AddToScheme, certificatesv1.AddToScheme, flowcontrolv1.AddToScheme, admissionregistrationv1.AddToScheme,
		apiregistrationv1.AddToScheme, authorizationv1.AddToScheme,
	} {
		utilruntime.Must(add(Scheme))
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	// DeleteOptions and friends also travel as meta.k8s.io/v1 (and without a kind at all).
	Scheme.AddKnownTypes(metav1.SchemeGroupVersion, &metav1.DeleteOptions{}, &metav1.ListOptions{}, &metav1.GetOptions{}, &metav1.CreateOptions{}, &metav1.UpdateOptions{}, &metav1.PatchOptions{})
	utilruntime.Must(metav1.AddMetaToScheme(Scheme))
	Codecs = serializer.NewCodecFactory(Scheme)
}

// The media types and serializers the server and the client share.
const (
	MediaTypeJSON     = "application/json"
	MediaTypeProtobuf = "application/vnd.kubernetes.protobuf"
)

var (
	// JSON encodes and decodes JSON without strictness.
	JSON = json.NewSerializerWithOptions(json.DefaultMetaFactory, Scheme, Scheme, json.SerializerOptions{})
	// Protobuf is Kubernetes protobuf with the "k8s\x00" envelope (bodies, stored objects).
	Protobuf = protobuf.NewSerializer(Scheme, Scheme)
	// RawProtobuf has no envelope, as the frames of protobuf watch streams.
	RawProtobuf = protobuf.NewRawSerializer(Scheme, Scheme)
)
