package podcontrol

import (
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/controller"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OwnerKey is the key ("ns/name") of the owner of kind gvk controlling p, if one does.
func OwnerKey(p *corev1.Pod, gvk schema.GroupVersionKind) (string, bool) {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.Kind != gvk.Kind || ref.APIVersion != gvk.GroupVersion().String() {
		return "", false
	}
	return p.Namespace + "/" + ref.Name, true
}

// WatchOwned queues, delay after each change, the owner (of kind gvk) of every pod of inf that
// is added, changed or deleted (the old owner too when it changed), and settles exp: a pod
// seen is a creation observed, a pod marked for deletion or gone a deletion observed.
func WatchOwned(l *controller.Loop, inf *cache.Informer[*corev1.Pod], gvk schema.GroupVersionKind, exp *Expectations, delay time.Duration) {
	controller.Watch(l, inf, cache.Handler[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod, _ bool) {
			if key, ok := OwnerKey(p, gvk); ok {
				exp.CreationObserved(key)
				l.Queue.AddAfter(key, delay)
			}
		},
		OnUpdate: func(old, p *corev1.Pod) {
			key, ok := OwnerKey(p, gvk)
			if ok && p.DeletionTimestamp != nil && old.DeletionTimestamp == nil {
				exp.DeletionObserved(key, cache.MetaNamespaceKey(p))
			}
			if oldKey, had := OwnerKey(old, gvk); had && oldKey != key {
				l.Queue.AddAfter(oldKey, delay)
			}
			if ok {
				l.Queue.AddAfter(key, delay)
			}
		},
		OnDelete: func(p *corev1.Pod, _ bool) {
			if key, ok := OwnerKey(p, gvk); ok {
				exp.DeletionObserved(key, cache.MetaNamespaceKey(p))
				l.Queue.AddAfter(key, delay)
			}
		},
	}, 0)
}
