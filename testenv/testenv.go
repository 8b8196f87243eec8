package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kplane/kplane/apiserver"
	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/controller/manager"
	"github.com/kplane/kplane/internal/inprocess"
	"github.com/kplane/kplane/node"
	"github.com/kplane/kplane/scheduler"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Env is a running control plane of one test.
type Env struct {
	// Config reaches the apiserver as its administrator, for client-go and controller-runtime
	// (QPS 1000, burst 2000: the server is in this process and serves this test alone).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same access, for kubectl and
	// other tools (KUBECONFIG=env.Kubeconfig).
	Kubeconfig string
	// Dir is the instance's data dir (etcd's data, the kubeconfig, the node agent's pods),
	// removed when the test ends.
	Dir string
	// WebhookServer is where the installed webhooks (admission and CRD conversion) that name a
	// Service expect the test's own webhook server (see WebhookServer).
	WebhookServer WebhookServer

	stopOnce  sync.Once
	stop      func() error
	removeDir bool // New's temporary dir; Start's is t's to remove
}

// Start starts an apiserver with its own embedded etcd, a free port and its data in
// t.TempDir(), the controllers the options choose, installs the options' CRDs (Established
// and in discovery) and webhook configurations, and returns once all of it is ready. Any
// failure fails t with t.Fatal, naming the option or file at fault; every wait is bounded by
// WithTimeout. The Env is stopped when t ends (t.Cleanup), with every goroutine it started
// ended and its data dir removed.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	env, err := start(opts, t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("testenv: stop: %v", err)
		}
	})
	return env
}

// New is Start for code with no testing.TB at hand (TestMain, a Ginkgo BeforeSuite): its data
// dir is a new temporary directory, and the caller calls Stop, which removes it. A failure
// is returned as Start would report it, with nothing left running.
func New(opts ...Option) (*Env, error) {
	dir, err := os.MkdirTemp("", "kplane-testenv-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	env, err := start(opts, dir)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("testenv: %w", err), os.RemoveAll(dir))
	}
	env.removeDir = true
	return env, nil
}

// Stop stops the Env before its test ends (Start's cleanup does it otherwise); it returns
// once every goroutine of the Env has ended. Calling it again does nothing.
func (e *Env) Stop() error {
	var err error
	e.stopOnce.Do(func() {
		err = e.stop()
		if e.removeDir {
			err = errors.Join(err, os.RemoveAll(e.Dir))
		}
	})
	return err
}

// start starts an Env in dir; on failure, what it started is stopped.
func start(opts []Option, dir string) (env *Env, err error) {
	s := &settings{timeout: DefaultTimeout}
	for _, o := range opts {
		o(s)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	// Everything that may be wrong with the input is found before anything starts.
	cm := manager.DefaultOptions()
	switch {
	case s.noControllers:
		cm.Controllers = nil
	case s.controllers != nil:
		cm.Controllers = s.controllers
	default:
		cm.Controllers = DefaultControllers
	}
	cm.LeaderElect = false
	if err := cm.Validate(); err != nil {
		return nil, fmt.Errorf("WithControllers: %w", err)
	}
	manifests, err := s.manifests()
	if err != nil {
		return nil, err
	}

	env = &Env{Dir: dir}
	env.Kubeconfig = filepath.Join(env.Dir, "kubeconfig")
	if env.WebhookServer, err = newWebhookServer(filepath.Join(env.Dir, "webhook-certs")); err != nil {
		return nil, err
	}
	for i, m := range manifests {
		if manifests[i], err = env.WebhookServer.pointAt(m); err != nil {
			return nil, err
		}
	}
	o := apiserver.DefaultOptions()
	o.DataDir, o.WriteKubeconfig = filepath.Join(env.Dir, "data"), env.Kubeconfig
	o.SecurePort, o.EtcdNoFsync, o.Profiling = 0, true, false
	// A fresh etcd member elects itself within one to six raft ticks, most of the start at
	// the default 20 ms tick (bench/README.md, testenv); 200 idle wake-ups a second are
	// nothing for a test.
	o.EtcdTick = 5 * time.Millisecond
	unroute := routeLogs(s.logs)
	ctx, cancel := context.WithCancel(context.Background())
	api, err := apiserver.Start(ctx, o)
	if err != nil {
		cancel()
		unroute()
		return nil, err
	}
	var roles sync.WaitGroup
	var roleErrs []error
	var mu sync.Mutex
	run := func(name string, f func() error) {
		roles.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				mu.Lock()
				roleErrs = append(roleErrs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	var local *client.Client
	env.stop = func() error {
		cancel()
		roles.Wait()
		err := api.Wait()
		unroute()
		if local != nil {
			local.CloseIdleConnections()
		}
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(append(roleErrs, err)...)
	}
	started := env // the returns below set env to nil
	defer func() {
		if err != nil {
			err = errors.Join(err, started.Stop())
		}
	}()

	if err := inprocess.WaitReady(ctx, api, s.timeout); err != nil {
		return nil, err
	}
	if env.Config, err = clientcmd.RESTConfigFromKubeConfig(api.Kubeconfig); err != nil {
		return nil, err
	}
	env.Config.QPS, env.Config.Burst = inprocess.LocalQPS, inprocess.LocalBurst
	if local, err = inprocess.Client(env.Kubeconfig); err != nil {
		return nil, err
	}
	install, done := context.WithTimeoutCause(ctx, s.timeout, fmt.Errorf("timed out after %v", s.timeout))
	defer done()
	if err := create(install, local, manifests); err != nil {
		return nil, err
	}
	if err := waitEstablished(install, local, crdsOf(manifests)); err != nil {
		return nil, err
	}

	if !s.noControllers {
		inproc := inprocess.ControllerManager(api, env.Kubeconfig)
		inproc.Controllers = cm.Controllers
		m, err := manager.StartWithClient(ctx, inproc, local)
		if err != nil {
			return nil, fmt.Errorf("controller manager: %w", err)
		}
		run("controller manager", m.Wait)
	}
	if s.scheduler {
		sched := inprocess.Scheduler(env.Kubeconfig)
		run("scheduler", func() error { return scheduler.RunWithClient(ctx, sched, local) })
	}
	if s.node {
		agent, err := node.New(local, inprocess.Node(env.Kubeconfig, filepath.Join(env.Dir, "node"), ""))
		if err != nil {
			return nil, fmt.Errorf("node agent: %w", err)
		}
		run("node agent", func() error { return agent.Run(ctx) })
	}
	return env, nil
}

// manifests reads and gathers every object the options install, CRDs first.
func (s *settings) manifests() ([]manifest, error) {
	crds, err := readManifests("WithCRDs", s.crdPaths, "CustomResourceDefinition")
	if err != nil {
		return nil, err
	}
	objs, err := objectManifests("WithCRDObjects", "apiextensions.k8s.io/v1", "CustomResourceDefinition", s.crds,
		func(c *apiextensionsv1.CustomResourceDefinition) string { return c.Name })
	if err != nil {
		return nil, err
	}
	crds = append(crds, objs...)
	hooks, err := readManifests("WithWebhookConfigs", s.webhookPaths, "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
	if err != nil {
		return nil, err
	}
	validating, err := objectManifests("WithValidatingWebhooks", "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", s.validating,
		func(c *admissionregistrationv1.ValidatingWebhookConfiguration) string { return c.Name })
	if err != nil {
		return nil, err
	}
	mutating, err := objectManifests("WithMutatingWebhooks", "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", s.mutating,
		func(c *admissionregistrationv1.MutatingWebhookConfiguration) string { return c.Name })
	if err != nil {
		return nil, err
	}
	return append(append(append(crds, hooks...), validating...), mutating...), nil
}

func crdsOf(ms []manifest) []manifest {
	var out []manifest
	for _, m := range ms {
		if m.meta.Kind == "CustomResourceDefinition" {
			out = append(out, m)
		}
	}
	return out
}
