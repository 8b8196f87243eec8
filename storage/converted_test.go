package storage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// shouting serves config maps whose data values are upper case, stored lower case.
type shouting struct{}

func (shouting) Served(_ context.Context, stored []storage.Object) ([]storage.Object, error) {
	out := make([]storage.Object, len(stored))
	for i, o := range stored {
		c := o.(*corev1.ConfigMap).DeepCopy()
		for k, v := range c.Data {
			c.Data[k] = strings.ToUpper(v)
		}
		out[i] = c
	}
	return out, nil
}

func (shouting) Stored(_ context.Context, obj storage.Object) (storage.Object, error) {
	c := obj.(*corev1.ConfigMap).DeepCopy()
	for k, v := range c.Data {
		c.Data[k] = strings.ToLower(v)
	}
	return c, nil
}

// A field selector on converted fields is matched after conversion: an object whose converted
// value enters or leaves the selection is ADDED or DELETED for the watcher.
func TestConvertedFieldSelector(t *testing.T) {
	base := configMaps(t, storage.CacheOptions{})
	v := storage.NewConverted(base, storage.ResourceConfig{NewList: func() runtime.Object { return &corev1.ConfigMapList{} }}, shouting{})
	ctx := context.Background()
	attrs := func(o storage.Object) (labels.Set, fields.Set) {
		return labels.Set(o.GetLabels()), fields.Set{"data.k": o.(*corev1.ConfigMap).Data["k"]}
	}
	pred := storage.Predicate{Label: labels.Everything(), Field: fields.OneTermEqualSelector("data.k", "RED"), Attrs: attrs}
	if _, err := v.Create(ctx, cm("red"), nil, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := base.Get(ctx, "ns", "red"); got.(*corev1.ConfigMap).Data["k"] != "red" {
		t.Fatalf("stored: %v", got)
	}
	// A consistent watch: its initial events include the create above, then a bookmark.
	w, err := v.Watch(ctx, "ns", storage.WatchOptions{SendInitialEvents: true, Bookmarks: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if len(w.Initial) != 2 || w.Initial[0].Type != watch.Added || w.Initial[0].Object.(*corev1.ConfigMap).Data["k"] != "RED" || !w.Initial[1].InitialEventsEnd {
		t.Fatalf("initial events: %+v", w.Initial)
	}
	set := func(value string) {
		t.Helper()
		if _, err := v.Update(ctx, "ns", "red", func(cur storage.Object) (storage.Object, error) {
			cur.(*corev1.ConfigMap).Data["k"] = value
			return cur, nil
		}, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	set("BLUE")
	set("GREEN") // outside the selection before and after: not delivered
	listed := func() int {
		t.Helper()
		list, err := v.List(ctx, "ns", storage.ListOptions{Predicate: pred})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.(*corev1.ConfigMapList).Items)
	}
	if n := listed(); n != 0 {
		t.Errorf("list while GREEN: %d items, want none", n)
	}
	set("RED")
	if n := listed(); n != 1 {
		t.Errorf("list while RED: %d items, want 1", n)
	}
	if _, err := v.Delete(ctx, "ns", "red", nil, nil, false); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		var e storage.Event
		select {
		case e = <-w.C:
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %v; no more within 10 s", got)
		}
		got = append(got, string(e.Type)+" "+e.Object.(*corev1.ConfigMap).Data["k"])
	}
	if want := []string{string(watch.Deleted) + " BLUE", string(watch.Added) + " RED", string(watch.Deleted) + " RED"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events = %v, want %v", got, want)
	}
	if n := listed(); n != 0 {
		t.Errorf("list after delete: %d items", n)
	}
}
