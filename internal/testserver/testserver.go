// Package testserver starts a real kplane apiserver (embedded etcd, real HTTP) for the tests of
// other packages: one per test package, on a free port and a temporary data dir.
package testserver

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Start starts an apiserver with test settings (free port, temporary data dir, no fsync),
// adjusted by mutate if it is not nil, and waits until it is ready. Stop removes the data dir
// unless mutate chose one.
func Start(mutate func(*apiserver.Options)) (*Server, error) {
	dir, err := os.MkdirTemp("", "kplane-test")
	if err != nil {
		return nil, err
	}
	o := apiserver.DefaultOptions()
	o.DataDir, o.SecurePort, o.EtcdNoFsync = dir, 0, true
	if mutate != nil {
		mutate(&o)
	}
	inst, err := apiserver.Start(context.Background(), o)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !inst.Server.Ready() {
		if time.Now().After(deadline) {
			_ = inst.Stop()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("apiserver not ready after 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return &Server{Instance: inst, dir: dir}, nil
}

// Server is a running test apiserver.
type Server struct {
	*apiserver.Instance
	dir string
}

// Stop stops the server and removes its temporary data dir.
func (s *Server) Stop() error {
	err := s.Instance.Stop()
	os.RemoveAll(s.dir)
	return err
}

// Namespace creates a namespace named prefix plus a random suffix, so each test works in its own.
func Namespace(t testing.TB, c *client.Client, prefix string) string {
	t.Helper()
	ns, err := client.Resource[*corev1.Namespace](c, "namespaces").Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Main is a test package's TestMain body: it starts one apiserver for the whole package, hands
// it and a client without rate limit to setup (which keeps what the tests need), runs the tests,
// stops the server and exits with the tests' result.
func Main(m *testing.M, setup func(*Server, *client.Client)) {
	srv, err := Start(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := client.New(client.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		_ = srv.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	setup(srv, c)
	code := m.Run()
	_ = srv.Stop()
	os.Exit(code)
}
