package storage_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

var etcd *storage.Etcd

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kplane-storage-test")
	if err != nil {
		panic(err)
	}
	etcd, err = storage.StartEmbedded(storage.EmbeddedOptions{Dir: dir, NoFsync: true})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	etcd.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// configMaps returns a running store of config maps under a resource name of its own.
func configMaps(t *testing.T, opts storage.CacheOptions) *storage.Store {
	t.Helper()
	s := storage.NewStore(etcd, apiserver.StorageCodec{}, storage.ResourceConfig{
		GroupResource: schema.GroupResource{Group: "test" + fmt.Sprint(time.Now().UnixNano()), Resource: "configmaps"},
		Kind:          corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		New:           func() storage.Object { return &corev1.ConfigMap{} },
		NewList:       func() runtime.Object { return &corev1.ConfigMapList{} },
	}, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string]string{"k": name}}
}

func TestCreateUpdateDelete(t *testing.T) {
	s := configMaps(t, storage.CacheOptions{})
	ctx := context.Background()
	created, err := s.Create(ctx, cm("a"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, cm("a"), nil, false); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v", err)
	}
	calls := 0
	updated, err := s.Update(ctx, "ns", "a", func(cur storage.Object) (storage.Object, error) {
		calls++
		if calls == 1 {
			// Another writer gets in between: the update must be recomputed on its result.
			if _, err := s.Update(ctx, "ns", "a", func(c storage.Object) (storage.Object, error) {
				c.(*corev1.ConfigMap).Data["other"] = "x"
				return c, nil
			}, nil, false); err != nil {
				t.Fatal(err)
			}
		}
		cur.(*corev1.ConfigMap).Data["k"] = "changed"
		return cur, nil
	}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	data := updated.(*corev1.ConfigMap).Data
	if calls != 2 || data["k"] != "changed" || data["other"] != "x" || updated.GetResourceVersion() == created.GetResourceVersion() {
		t.Fatalf("update after race: calls=%d data=%v", calls, data)
	}
	// A consistent list sees the write at once.
	list, err := s.List(ctx, "ns", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if items := list.(*corev1.ConfigMapList).Items; len(items) != 1 || items[0].Data["k"] != "changed" {
		t.Fatalf("consistent list: %+v", items)
	}
	if _, err := s.Delete(ctx, "ns", "a", nil, nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ns", "a"); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
}

// A list at WrittenRevision sees the store's own writes, each kind of them, at once.
func TestListAtWrittenRevision(t *testing.T) {
	s := configMaps(t, storage.CacheOptions{})
	ctx := context.Background()
	if rv := s.WrittenRevision(); rv != "0" {
		t.Fatalf("before any write: %q", rv)
	}
	listed := func() []string {
		t.Helper()
		list, err := s.List(ctx, "ns", storage.ListOptions{ResourceVersion: s.WrittenRevision()})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range list.(*corev1.ConfigMapList).Items {
			out = append(out, it.Name+"="+it.Data["k"])
		}
		return out
	}
	for i := range 20 {
		name := fmt.Sprint("c", i)
		created, err := s.Create(ctx, cm(name), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.WrittenRevision(); got != created.GetResourceVersion() {
			t.Fatalf("after create: %s, want the object's %s", got, created.GetResourceVersion())
		}
		if got := listed(); len(got) != 1 || got[0] != name+"="+name {
			t.Fatalf("after creating %s: %v", name, got)
		}
		if _, err := s.Update(ctx, "ns", name, func(cur storage.Object) (storage.Object, error) {
			cur.(*corev1.ConfigMap).Data["k"] = "updated"
			return cur, nil
		}, nil, false); err != nil {
			t.Fatal(err)
		}
		if got := listed(); len(got) != 1 || got[0] != name+"=updated" {
			t.Fatalf("after updating %s: %v", name, got)
		}
		if _, err := s.Delete(ctx, "ns", name, nil, nil, false); err != nil {
			t.Fatal(err)
		}
		if got := listed(); len(got) != 0 {
			t.Fatalf("after deleting %s: %v", name, got)
		}
	}
}

func TestClaimsAreExclusive(t *testing.T) {
	s := configMaps(t, storage.CacheOptions{})
	ctx := context.Background()
	claims := func(storage.Object) []string { return []string{"test/claim-" + t.Name()} }
	if _, err := s.Create(ctx, cm("holder"), claims(nil), false); err != nil {
		t.Fatal(err)
	}
	_, err := s.Create(ctx, cm("other"), claims(nil), false)
	if _, ok := err.(*storage.ErrClaimTaken); !ok {
		t.Fatalf("second claim: %v", err)
	}
	if _, err := s.Get(ctx, "ns", "other"); !apierrors.IsNotFound(err) {
		t.Fatal("a create that lost its claim stored the object")
	}
	if _, err := s.Delete(ctx, "ns", "holder", nil, claims, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, cm("other"), claims(nil), false); err != nil {
		t.Fatalf("claim not released by delete: %v", err)
	}
}

func TestWatchWindow(t *testing.T) {
	s := configMaps(t, storage.CacheOptions{Window: 3, FreshnessTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	var revs []string
	for i := 0; i < 6; i++ {
		obj, err := s.Create(ctx, cm(fmt.Sprint("w", i)), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, obj.GetResourceVersion())
	}
	// Resuming inside the window replays what came after.
	w, err := s.Watch(ctx, "ns", storage.WatchOptions{ResourceVersion: revs[3]})
	if err != nil {
		t.Fatal(err)
	}
	// The cache may not have applied the newest create yet: the rest arrives live.
	events := w.Initial
	for len(events) < 2 {
		select {
		case ev := <-w.C:
			events = append(events, ev)
		case <-time.After(5 * time.Second):
			t.Fatalf("replay stopped at %+v", events)
		}
	}
	if events[0].Type != watch.Added || events[0].Object.GetName() != "w4" || events[1].Object.GetName() != "w5" {
		t.Fatalf("replay: %+v", events)
	}
	w.Stop()
	// Older than the window: 410 Expired.
	if _, err := s.Watch(ctx, "ns", storage.WatchOptions{ResourceVersion: revs[0]}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch before the window: %v", err)
	}
	// Newer than anything: 504 with ResourceVersionTooLarge.
	_, err = s.Watch(ctx, "ns", storage.WatchOptions{ResourceVersion: "99999999"})
	if !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Fatalf("watch from the future: %v", err)
	}
}

func TestCompactionExpiresContinueTokens(t *testing.T) {
	s := configMaps(t, storage.CacheOptions{})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := s.Create(ctx, cm(fmt.Sprint("c", i)), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.List(ctx, "ns", storage.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	cont := page.(*corev1.ConfigMapList).Continue
	if cont == "" {
		t.Fatal("no continue token")
	}
	if _, err := s.Create(ctx, cm("c-later"), nil, false); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go etcd.RunCompactor(cctx, 50*time.Millisecond)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.List(ctx, "ns", storage.ListOptions{Continue: cont, Limit: 1})
		if apierrors.IsResourceExpired(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("continue token still served after compaction: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
