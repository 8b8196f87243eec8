package storage_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestManyCachesStopTogether stops many watch caches on one etcd client at once, as the
// apiserver does on shutdown (more caches than the in-process client's watch stream has
// room for cancel requests and their answers): every one must return, and then etcd must close.
func TestManyCachesStopTogether(t *testing.T) {
	within := func(what string, d time.Duration, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(d):
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("%s took more than %s", what, d)
		}
	}
	for round := 0; round < 10; round++ {
		e, err := storage.StartEmbedded(storage.EmbeddedOptions{Dir: t.TempDir(), NoFsync: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := 0; i < 100; i++ {
			s := storage.NewStore(e, apiserver.StorageCodec{}, storage.ResourceConfig{
				GroupResource: schema.GroupResource{Group: fmt.Sprintf("group%d", i), Resource: "configmaps"},
				Kind:          corev1.SchemeGroupVersion.WithKind("ConfigMap"),
				New:           func() storage.Object { return &corev1.ConfigMap{} },
				NewList:       func() runtime.Object { return &corev1.ConfigMapList{} },
			}, storage.CacheOptions{})
			wg.Add(1)
			go func() { defer wg.Done(); s.Run(ctx) }()
			if err := s.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Let every watch be created before they are all cancelled together.
		time.Sleep(50 * time.Millisecond)
		cancel()
		within(fmt.Sprintf("round %d: stopping the watch caches", round), 10*time.Second, wg.Wait)
		within(fmt.Sprintf("round %d: closing etcd", round), 10*time.Second, e.Close)
	}
}
