package apiserver

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGCFinalizers(t *testing.T) {
	policy := func(p metav1.DeletionPropagation) *metav1.DeleteOptions {
		return &metav1.DeleteOptions{PropagationPolicy: &p}
	}
	orphanDeps := func(b bool) *metav1.DeleteOptions { return &metav1.DeleteOptions{OrphanDependents: &b} }
	for _, tc := range []struct {
		name string
		have []string
		opts *metav1.DeleteOptions
		want []string
	}{
		{"default sets none", nil, &metav1.DeleteOptions{}, nil},
		{"background sets none", nil, policy(metav1.DeletePropagationBackground), nil},
		{"foreground", nil, policy(metav1.DeletePropagationForeground), []string{"foregroundDeletion"}},
		{"orphan", nil, policy(metav1.DeletePropagationOrphan), []string{"orphan"}},
		{"orphanDependents true", nil, orphanDeps(true), []string{"orphan"}},
		{"orphanDependents false", []string{"orphan"}, orphanDeps(false), nil},
		{"others kept", []string{"example.com/a"}, policy(metav1.DeletePropagationForeground), []string{"example.com/a", "foregroundDeletion"}},
		{"orphan replaced by foreground", []string{"orphan", "x/y"}, policy(metav1.DeletePropagationForeground), []string{"x/y", "foregroundDeletion"}},
		{"background clears both", []string{"foregroundDeletion"}, policy(metav1.DeletePropagationBackground), nil},
		{"object's own choice without options", []string{"foregroundDeletion"}, &metav1.DeleteOptions{}, []string{"foregroundDeletion"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gcFinalizers(tc.have, tc.opts); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
