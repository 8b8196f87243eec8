package replicaset

import (
	"errors"
	"fmt"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/controller"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind adapts one owner kind to the controller: what it is called and how its spec and
// status are read and written. ReplicaSets and ReplicationControllers differ only here.
type Kind[T cache.Object] struct {
	// Name is the controller's short name.
	Name string
	// Component names the controller as the source of its events.
	Component string
	// Resource is the owners' plural resource name.
	Resource string
	// GVK is written into the pods' ownerReferences.
	GVK schema.GroupVersionKind
	// Selector returns the owner's pod selector; an error for an invalid one.
	Selector func(T) (labels.Selector, error)
	// Replicas is the desired pod count.
	Replicas        func(T) int32
	MinReadySeconds func(T) int32
	// Template is the pod template (nil when the owner has none).
	Template func(T) *corev1.PodTemplateSpec
	Status   func(T) Status
	// WithStatus returns a copy of the owner with its status set to s.
	WithStatus func(T, Status) T
	// WorkersFlag is kube-controller-manager's flag for the controller's workers.
	WorkersFlag string
}

// ReplicaSets is the apps/v1 ReplicaSet kind.
var ReplicaSets = Kind[*appsv1.ReplicaSet]{
	Name:      "replicaset",
	Component: "replicaset-controller",
	Resource:  "replicasets",
	GVK:       appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
	Selector: func(rs *appsv1.ReplicaSet) (labels.Selector, error) {
		return metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	},
	Replicas:        func(rs *appsv1.ReplicaSet) int32 { return replicas(rs.Spec.Replicas) },
	MinReadySeconds: func(rs *appsv1.ReplicaSet) int32 { return rs.Spec.MinReadySeconds },
	Template:        func(rs *appsv1.ReplicaSet) *corev1.PodTemplateSpec { return &rs.Spec.Template },
	Status: func(rs *appsv1.ReplicaSet) Status {
		s := rs.Status
		return Status{Replicas: s.Replicas, FullyLabeledReplicas: s.FullyLabeledReplicas, ReadyReplicas: s.ReadyReplicas,
			AvailableReplicas: s.AvailableReplicas, ObservedGeneration: s.ObservedGeneration}
	},
	WithStatus: func(rs *appsv1.ReplicaSet, s Status) *appsv1.ReplicaSet {
		rs = rs.DeepCopy()
		rs.Status.Replicas, rs.Status.FullyLabeledReplicas, rs.Status.ReadyReplicas = s.Replicas, s.FullyLabeledReplicas, s.ReadyReplicas
		rs.Status.AvailableReplicas, rs.Status.ObservedGeneration = s.AvailableReplicas, s.ObservedGeneration
		return rs
	},
	WorkersFlag: "concurrent-replicaset-syncs",
}

// ReplicationControllers is the core/v1 ReplicationController kind.
var ReplicationControllers = Kind[*corev1.ReplicationController]{
	Name:      "replicationcontroller",
	Component: "replication-controller",
	Resource:  "replicationcontrollers",
	GVK:       corev1.SchemeGroupVersion.WithKind("ReplicationController"),
	Selector: func(rc *corev1.ReplicationController) (labels.Selector, error) {
		// An empty selector selects nothing here (validation requires one).
		if len(rc.Spec.Selector) == 0 {
			return labels.Nothing(), nil
		}
		return labels.SelectorFromSet(rc.Spec.Selector), nil
	},
	Replicas:        func(rc *corev1.ReplicationController) int32 { return replicas(rc.Spec.Replicas) },
	MinReadySeconds: func(rc *corev1.ReplicationController) int32 { return rc.Spec.MinReadySeconds },
	Template:        func(rc *corev1.ReplicationController) *corev1.PodTemplateSpec { return rc.Spec.Template },
	Status: func(rc *corev1.ReplicationController) Status {
		s := rc.Status
		return Status{Replicas: s.Replicas, FullyLabeledReplicas: s.FullyLabeledReplicas, ReadyReplicas: s.ReadyReplicas,
			AvailableReplicas: s.AvailableReplicas, ObservedGeneration: s.ObservedGeneration}
	},
	WithStatus: func(rc *corev1.ReplicationController, s Status) *corev1.ReplicationController {
		rc = rc.DeepCopy()
		rc.Status.Replicas, rc.Status.FullyLabeledReplicas, rc.Status.ReadyReplicas = s.Replicas, s.FullyLabeledReplicas, s.ReadyReplicas
		rc.Status.AvailableReplicas, rc.Status.ObservedGeneration = s.AvailableReplicas, s.ObservedGeneration
		return rc
	},
	WorkersFlag: "concurrent-rc-syncs",
}

// replicas: a missing count means 1, as the API defaults it.
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

// ReplicaSetEntry and ReplicationControllerEntry register the two controllers.
var (
	ReplicaSetEntry            = entry(ReplicaSets)
	ReplicationControllerEntry = entry(ReplicationControllers)
)

func entry[T cache.Object](k Kind[T]) controller.Entry {
	return controller.Entry{
		Name:    k.Name + "-controller",
		Aliases: []string{k.Name},
		Options: func() controller.Options { return DefaultOptions(k) },
		New: controller.Build(func(ctx *controller.Context, o *Options) (*Controller[T], error) {
			return New(ctx, k, o)
		}),
	}
}

// Options are the settings of the controller of one kind; each kind has its own, bound to its
// own flag.
type Options struct {
	// ConcurrentSyncs: owners synced at once (--concurrent-replicaset-syncs for ReplicaSets,
	// --concurrent-rc-syncs for ReplicationControllers; 5).
	ConcurrentSyncs int

	flag string // Kind.WorkersFlag
	kind string // the owner kind, for the flag's help
}

// DefaultOptions returns kube-controller-manager v1.36's defaults for kind k.
func DefaultOptions[T cache.Object](k Kind[T]) *Options {
	return &Options{ConcurrentSyncs: 5, flag: k.WorkersFlag, kind: k.GVK.Kind}
}

// AddFlags binds o to kube-controller-manager's flag for its kind.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ConcurrentSyncs, o.flag, o.ConcurrentSyncs, fmt.Sprintf("workers of the %s controller", o.kind))
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	if o.ConcurrentSyncs < 1 {
		return []error{errors.New("--" + o.flag + " must be at least 1")}
	}
	return nil
}
