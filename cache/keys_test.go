package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cg "k8s.io/client-go/tools/cache"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		ns, name, key string
	}{
		{"default", "web-1", "default/web-1"},
		{"", "node-a", "node-a"},
		{"kube-system", "a.b-c", "kube-system/a.b-c"},
	} {
		obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: tc.ns, Name: tc.name}}
		if got := MetaNamespaceKey(obj); got != tc.key {
			t.Errorf("MetaNamespaceKey(%q, %q) = %q, want %q", tc.ns, tc.name, got, tc.key)
		}
		if theirs, _ := cg.MetaNamespaceKeyFunc(obj); theirs != tc.key {
			t.Errorf("client-go keys (%q, %q) as %q, we as %q", tc.ns, tc.name, theirs, tc.key)
		}
		ns, name, err := SplitKey(tc.key)
		if err != nil || ns != tc.ns || name != tc.name {
			t.Errorf("SplitKey(%q) = %q, %q, %v; want %q, %q", tc.key, ns, name, err, tc.ns, tc.name)
		}
	}
	for _, bad := range []string{"", "a/b/c", "/name", "ns/", "/"} {
		if ns, name, err := SplitKey(bad); err == nil {
			t.Errorf("SplitKey(%q) = %q, %q, nil; want an error", bad, ns, name)
		}
	}
}
