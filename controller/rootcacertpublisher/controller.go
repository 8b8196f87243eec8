// Package rootcacertpublisher is kube-controller-manager's root-ca-certificate-publisher-controller:
// every namespace has a ConfigMap kube-root-ca.crt whose "ca.crt" is the CA bundle that verifies
// the API server (--root-ca-file, else the manager's kubeconfig CA). It is created in each new
// namespace, created again when deleted, and restored when edited. Pods read it through their
// projected kube-api-access volume; test frameworks wait for it in every new namespace.
package rootcacertpublisher

import (
	"context"
	"errors"
	"maps"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller"
	"github.com/kplane/kplane/reconcile"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the controller's name in --controllers, as in kube-controller-manager v1.36; Alias is
// its older name, which --controllers also takes.
const (
	Name  = "root-ca-certificate-publisher-controller"
	Alias = "root-ca-cert-publisher"
)

// ConfigMapName is the published ConfigMap; DataKey its one key.
const (
	ConfigMapName = "kube-root-ca.crt"
	DataKey       = "ca.crt"
)

// The annotation Kubernetes describes the ConfigMap with.
const (
	descriptionAnnotation = "kubernetes.io/description"
	description           = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// Entry registers the controller with the manager; one worker, as in kube-controller-manager.
// Its one setting, --root-ca-file, is the manager's (controller.Context.RootCA).
var Entry = controller.Entry{
	Name:    Name,
	Aliases: []string{Alias},
	Options: func() controller.Options { return controller.NoOptions{} },
	New:     controller.Build(New),
}

// Controller queues namespace names; sync makes the namespace's ConfigMap what it should be.
type Controller struct {
	client *client.Client
	rootCA string
	maps   *cache.Informer[*corev1.ConfigMap]
	nss    *cache.Informer[*corev1.Namespace]
	loop   *controller.Loop
}

// New builds the controller on ctx's informers (configmaps, namespaces).
func New(ctx *controller.Context, _ controller.NoOptions) (*Controller, error) {
	if ctx == nil || ctx.Client == nil || ctx.Informers == nil {
		return nil, errors.New("root CA publisher: the context needs a client and informers")
	}
	rootCA, err := ctx.RootCA()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		client: ctx.Client,
		rootCA: string(rootCA),
		maps:   cache.For[*corev1.ConfigMap](ctx.Informers, "configmaps"),
		nss:    cache.For[*corev1.Namespace](ctx.Informers, "namespaces"),
		loop:   controller.NewLoop(ctx, Name, controller.WithQueueName("root_ca_cert_publisher")),
	}
	// Only the published ConfigMap matters, and only once it exists: a new namespace (its
	// event below) is what gets it made.
	queueFor := func(cm *corev1.ConfigMap) {
		if cm.Name == ConfigMapName {
			c.loop.Queue.Add(cm.Namespace)
		}
	}
	controller.Watch(c.loop, c.maps, cache.Handler[*corev1.ConfigMap]{
		OnUpdate: func(_, cm *corev1.ConfigMap) { queueFor(cm) },
		OnDelete: func(cm *corev1.ConfigMap, _ bool) { queueFor(cm) },
	}, 0)
	controller.Watch(c.loop, c.nss, cache.Handler[*corev1.Namespace]{
		OnAdd: func(ns *corev1.Namespace, _ bool) { c.loop.Queue.Add(ns.Name) },
		OnUpdate: func(_, ns *corev1.Namespace) {
			if ns.Status.Phase == corev1.NamespaceActive {
				c.loop.Queue.Add(ns.Name)
			}
		},
	}, ctx.ResyncPeriod())
	return c, nil
}

// Name is the controller's short name.
func (c *Controller) Name() string { return Name }

// Run waits for the caches and syncs until ctx is cancelled.
func (c *Controller) Run(ctx context.Context) error {
	c.loop.Run(ctx, reconcile.Ignore(c.sync))
	return nil
}

// sync creates or restores namespace ns's ConfigMap.
func (c *Controller) sync(ctx context.Context, ns string) error {
	configMaps := client.Resource[*corev1.ConfigMap](c.client, "configmaps").Namespace(ns)
	cm, err := c.maps.Lister().Namespace(ns).Get(ConfigMapName)
	if err != nil || cm == nil {
		_, err := configMaps.Create(ctx, Desired(c.rootCA, nil))
		switch {
		case err == nil, client.IsAlreadyExists(err):
			// Made by someone else since the cache looked: its events bring it here again.
			return nil
		case apierrors.IsNotFound(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return nil // the namespace is gone or going
		}
		return err
	}
	want := Desired(c.rootCA, cm)
	if maps.Equal(want.Data, cm.Data) && len(want.BinaryData) == len(cm.BinaryData) && maps.Equal(want.Annotations, cm.Annotations) {
		return nil
	}
	_, err = configMaps.Update(ctx, want)
	if client.IsNotFound(err) || client.IsConflict(err) {
		return nil // changed or deleted meanwhile: its event brings it here again
	}
	return err
}

// Desired is the ConfigMap the publisher wants, made from cur (nil: a new one): only ca.crt in
// its data, and Kubernetes' description among its annotations.
func Desired(rootCA string, cur *corev1.ConfigMap) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName}}
	if cur != nil {
		cm = cur.DeepCopy()
	}
	cm.Data = map[string]string{DataKey: rootCA}
	cm.BinaryData = nil
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[descriptionAnnotation] = description
	return cm
}
