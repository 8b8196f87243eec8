// Package scheme knows the Kubernetes API types kplane serves and speaks, for the API server and
// the client alike.
package scheme

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
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
