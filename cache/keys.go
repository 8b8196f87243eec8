package cache

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is what caches hold: a pointer to a k8s.io/api object (*corev1.Pod, *corev1.Service, ...).
//
// Caches share the objects they hold with every reader; an object handed to or returned by a
// cache must be treated as immutable (DeepCopy it before changing it).
type Object interface {
	runtime.Object
	metav1.Object
}

// MetaNamespaceKey returns the cache key of obj: "namespace/name" for namespaced objects and
// "name" for cluster-scoped ones. It is the only key function in this package; keys produced by
// it are accepted by SplitKey and by workqueues of string keys.
func MetaNamespaceKey(obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// SplitKey is the inverse of MetaNamespaceKey: "ns/name" gives (ns, name), "name" gives ("", name).
// Any other shape — more than one slash, or an empty namespace or name — is an error, since
// MetaNamespaceKey never produces it for an object that has a name.
func SplitKey(key string) (namespace, name string, err error) {
	ns, name, found := strings.Cut(key, "/")
	if !found {
		ns, name = "", key
	} else if ns == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("cache: unexpected key format %q", key)
	}
	if name == "" {
		return "", "", fmt.Errorf("cache: key %q has an empty name", key)
	}
	return ns, name, nil
}
