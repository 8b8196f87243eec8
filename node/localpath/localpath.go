// Package localpath is the node agent's built-in volume provisioner: it makes the default
// StorageClass "local-path" (provisioner kplane.io/local-path, reclaim policy Delete, binding
// mode WaitForFirstConsumer) and provisions the claims of its classes as directories on its
// node.
//
// It follows the protocol of Kubernetes' external provisioners. The PersistentVolume binder
// marks a claim for it (volume.kubernetes.io/storage-provisioner) once the scheduler has chosen
// a node for the claim's first pod (volume.kubernetes.io/selected-node); the provisioner of that
// node makes the directory <dir>/<volume> and a PersistentVolume pre-bound to the claim: a
// hostPath volume (type DirectoryOrCreate) with node affinity to the node, the claim's request
// and access modes, the class's reclaim policy, the pv.kubernetes.io/provisioned-by annotation
// and a finalizer (external-provisioner.volume.kubernetes.io/finalizer). The binder then binds
// the claim to it. When such a volume of its node is Released under Delete, the provisioner
// removes the directory and deletes the volume; the finalizer keeps the volume until the
// directory is gone, whoever deletes it.
//
// Use: localpath.New(client, nodeName, dir).Run(ctx), next to the node agent.
package localpath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/events"
	"github.com/kplane/kplane/internal/pv"
	"github.com/kplane/kplane/reconcile"
	"github.com/kplane/kplane/workqueue"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ProvisionerName is the provisioner of the classes this package serves.
	ProvisionerName = "kplane.io/local-path"
	// ClassName is the default StorageClass the provisioner makes.
	ClassName = "local-path"
)

// Queue keys.
const (
	claimPrefix  = "claim/"
	volumePrefix = "volume/"
)

// Provisioner provisions and deletes the local-path volumes of one node.
type Provisioner struct {
	client *client.Client
	node   string
	dir    string

	factory  *cache.Factory
	claims   *cache.Informer[*corev1.PersistentVolumeClaim]
	volumes  *cache.Informer[*corev1.PersistentVolume]
	classes  *cache.Informer[*storagev1.StorageClass]
	handlers []cache.Registration
	queue    *workqueue.RateLimitingQueue[string]
	events   *events.Recorder
}

// New makes the provisioner of node nodeName, keeping volumes under dir (an absolute path is
// best: it is what the volumes' hostPath records). Run starts it.
func New(c *client.Client, nodeName, dir string) *Provisioner {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	f := cache.NewFactory(c, "")
	p := &Provisioner{
		client:  c,
		node:    nodeName,
		dir:     dir,
		factory: f,
		claims:  cache.For[*corev1.PersistentVolumeClaim](f, "persistentvolumeclaims"),
		volumes: cache.For[*corev1.PersistentVolume](f, "persistentvolumes"),
		classes: cache.For[*storagev1.StorageClass](f, "storageclasses"),
		queue:   workqueue.NewRateLimited[string](workqueue.DefaultControllerRateLimiter[string](), workqueue.WithName("local-path")),
		// External provisioners name themselves "<provisioner>_<identity>" in events.
		events: events.NewRecorder(c).For(ProvisionerName + "_" + nodeName),
	}
	p.handlers = []cache.Registration{
		p.claims.AddHandler(cache.Handler[*corev1.PersistentVolumeClaim]{
			OnAdd:    func(c *corev1.PersistentVolumeClaim, _ bool) { p.claimChanged(c) },
			OnUpdate: func(_, c *corev1.PersistentVolumeClaim) { p.claimChanged(c) },
		}, 0),
		p.volumes.AddHandler(cache.Handler[*corev1.PersistentVolume]{
			OnAdd:    func(v *corev1.PersistentVolume, _ bool) { p.volumeChanged(v) },
			OnUpdate: func(_, v *corev1.PersistentVolume) { p.volumeChanged(v) },
		}, 0),
	}
	return p
}

// Run makes the default StorageClass if there is none of its name, then provisions and deletes
// volumes until ctx is cancelled. It returns nil then, or an error if dir cannot be made.
func (p *Provisioner) Run(ctx context.Context) error {
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fmt.Errorf("local-path: %w", err)
	}
	slog.Info("starting local-path provisioner", "node", p.node, "dir", p.dir)
	defer slog.Info("local-path provisioner stopped", "node", p.node)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.ensureClass(ctx) })
	wg.Go(func() { p.events.Run(ctx) })
	p.factory.Start(ctx)
	defer p.factory.Shutdown()
	reconcile.Workers{Name: "local-path", Queue: p.queue, Count: 1, Sync: reconcile.Ignore(p.sync), Handlers: p.handlers,
		Synced: []func() bool{p.claims.HasSynced, p.volumes.HasSynced, p.classes.HasSynced}}.Run(ctx)
	return nil
}

// DefaultClass is the StorageClass the provisioner makes when there is none named ClassName.
func DefaultClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: ClassName, Annotations: map[string]string{pv.AnnDefaultClass: "true"}},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     new(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: new(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// ensureClass creates the default class, retrying until the API server takes it. A class of
// that name made by someone else is left as it is.
func (p *Provisioner) ensureClass(ctx context.Context) {
	classes := client.Resource[*storagev1.StorageClass](p.client, "storageclasses")
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
		_, err := classes.Create(ctx, DefaultClass())
		if err == nil || client.IsAlreadyExists(err) {
			return
		}
		slog.Warn("local-path: cannot create the default StorageClass, will retry", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func (p *Provisioner) claimChanged(c *corev1.PersistentVolumeClaim) {
	if c.Annotations[pv.AnnStorageProvisioner] == ProvisionerName && c.Spec.VolumeName == "" {
		p.queue.Add(claimPrefix + c.Namespace + "/" + c.Name)
	}
}

func (p *Provisioner) volumeChanged(v *corev1.PersistentVolume) {
	if v.Annotations[pv.AnnDynamicallyProvisioned] == ProvisionerName {
		p.queue.Add(volumePrefix + v.Name)
	}
}

func (p *Provisioner) sync(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, volumePrefix); ok {
		v, found := p.volumes.Indexer().Get(name)
		if !found {
			return nil
		}
		return p.reclaim(ctx, v)
	}
	c, found := p.claims.Indexer().Get(strings.TrimPrefix(key, claimPrefix))
	if !found {
		return nil
	}
	var class *storagev1.StorageClass
	if sc, ok := p.classes.Indexer().Get(pv.ClaimClass(c)); ok {
		class = sc
	}
	switch why := skip(c, class, p.node); why {
	case "":
	case errNoNode:
		p.events.Eventf(c, corev1.EventTypeWarning, "ProvisioningFailed", "failed to provision volume with StorageClass %q: %s", class.Name, why)
		return nil
	default:
		return nil
	}
	return p.provision(ctx, c, class)
}

const errNoNode = "configuration error, no node was specified: local-path volumes need a class with volumeBindingMode WaitForFirstConsumer"

// skip says why this provisioner does not provision claim ("" when it does): the claim is
// bound, being deleted, not asked of this provisioner, or its first pod goes to another node.
// A claim whose pod has no node yet (a class with Immediate binding) cannot be placed:
// errNoNode.
func skip(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, node string) string {
	switch {
	case claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil:
		return "bound or going"
	case claim.Annotations[pv.AnnStorageProvisioner] != ProvisionerName:
		return "not asked"
	case class == nil || class.Provisioner != ProvisionerName:
		return "not our class"
	}
	selected, ok := claim.Annotations[pv.AnnSelectedNode]
	switch {
	case !ok:
		return errNoNode
	case selected != node:
		return "another node"
	}
	return ""
}

// VolumeName is the name of the volume provisioned for claim, as Kubernetes' provisioners
// name them.
func VolumeName(claim *corev1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

// volumeFor is the volume provisioned for claim of class on node, kept in path.
func volumeFor(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, node, path string) *corev1.PersistentVolume {
	policy := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		policy = *class.ReclaimPolicy
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        VolumeName(claim),
			Annotations: map[string]string{pv.AnnDynamicallyProvisioned: ProvisionerName},
			Finalizers:  []string{pv.ProvisionerFinalizer},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   slices.Clone(claim.Spec.AccessModes),
			PersistentVolumeReclaimPolicy: policy,
			StorageClassName:              class.Name,
			VolumeMode:                    new(corev1.PersistentVolumeFilesystem),
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace,
				Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: path, Type: new(corev1.HostPathDirectoryOrCreate)}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

func (p *Provisioner) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	name := VolumeName(claim)
	if _, ok := p.volumes.Indexer().Get(name); ok {
		return nil // provisioned already; the binder binds it
	}
	fail := func(err error) error {
		p.events.Eventf(claim, corev1.EventTypeWarning, "ProvisioningFailed", "failed to provision volume with StorageClass %q: %v", class.Name, err)
		return err
	}
	if claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return fail(errors.New("local-path volumes are directories; volumeMode Block is not supported"))
	}
	path := filepath.Join(p.dir, name)
	// Anyone may write: the pods using the volume may run as any user.
	if err := os.MkdirAll(path, 0o777); err != nil {
		return fail(err)
	}
	if err := os.Chmod(path, 0o777); err != nil {
		return fail(err)
	}
	_, err := client.Resource[*corev1.PersistentVolume](p.client, "persistentvolumes").Create(ctx, volumeFor(claim, class, p.node, path))
	switch {
	case client.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fail(err)
	}
	slog.Info("local-path: provisioned volume", "claim", claim.Namespace+"/"+claim.Name, "volume", name, "path", path)
	p.events.Eventf(claim, corev1.EventTypeNormal, "ProvisioningSucceeded", "Successfully provisioned volume %s", name)
	return nil
}

// reclaimAction is what to do about a provisioned volume.
type reclaimAction int

const (
	leave reclaimAction = iota
	// deleteVolume: remove the directory, then delete the volume (Released under Delete).
	deleteVolume
	// release: the volume is being deleted and no longer bound; remove the directory if its
	// policy is Delete, then the finalizer.
	release
)

// reclaimFor decides about volume v, given this provisioner's node and directory. Only volumes
// of this node, kept where this provisioner keeps them, are its business.
func reclaimFor(v *corev1.PersistentVolume, node, dir string) reclaimAction {
	if v.Annotations[pv.AnnDynamicallyProvisioned] != ProvisionerName || v.Spec.HostPath == nil ||
		v.Spec.HostPath.Path != filepath.Join(dir, v.Name) || !onNode(v, node) {
		return leave
	}
	switch {
	case v.DeletionTimestamp != nil:
		if v.Status.Phase != corev1.VolumeBound && slices.Contains(v.Finalizers, pv.ProvisionerFinalizer) {
			return release
		}
	case v.Status.Phase == corev1.VolumeReleased && v.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete:
		return deleteVolume
	}
	return leave
}

// onNode reports whether the volume's node affinity names node, as the provisioner writes it.
func onNode(v *corev1.PersistentVolume, node string) bool {
	if v.Spec.NodeAffinity == nil || v.Spec.NodeAffinity.Required == nil {
		return false
	}
	for _, term := range v.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, r := range term.MatchExpressions {
			if r.Key == corev1.LabelHostname && r.Operator == corev1.NodeSelectorOpIn && slices.Contains(r.Values, node) {
				return true
			}
		}
	}
	return false
}

func (p *Provisioner) reclaim(ctx context.Context, v *corev1.PersistentVolume) error {
	volumes := client.Resource[*corev1.PersistentVolume](p.client, "persistentvolumes")
	switch reclaimFor(v, p.node, p.dir) {
	case deleteVolume:
		if err := os.RemoveAll(v.Spec.HostPath.Path); err != nil {
			p.events.Eventf(v, corev1.EventTypeWarning, "VolumeFailedDelete", "failed to remove %s: %v", v.Spec.HostPath.Path, err)
			return err
		}
		uid := v.UID
		err := volumes.Delete(ctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !client.IsNotFound(err) {
			return err
		}
		slog.Info("local-path: deleted volume", "volume", v.Name, "path", v.Spec.HostPath.Path)
	case release:
		if v.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete {
			if err := os.RemoveAll(v.Spec.HostPath.Path); err != nil {
				return err
			}
		}
		next := v.DeepCopy()
		next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == pv.ProvisionerFinalizer })
		if _, err := volumes.Update(ctx, next); err != nil && !client.IsNotFound(err) {
			return err
		}
	}
	return nil
}
