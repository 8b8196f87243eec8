// Package testenv runs kplane as a control plane inside Go tests: what controller-runtime's
// envtest does with downloaded kube-apiserver and etcd binaries, in-process and in
// milliseconds, with the controllers envtest lacks.
//
//	env := testenv.Start(t, testenv.WithCRDs("config/crd/bases"))
//	c, err := kubernetes.NewForConfig(env.Config)    // or client.New(env.Config, ...) of controller-runtime
//	cmd := exec.Command("kubectl", "--kubeconfig", env.Kubeconfig, "get", "pods")
//
// Each Env has its own embedded etcd and apiserver, its data under t.TempDir() and its own
// free ports, so any number run at once: parallel subtests of one test binary, and the test
// binaries `go test ./...` runs side by side. Start returns once the apiserver is ready and
// the CRDs of WithCRDs and WithCRDObjects are Established and listed by discovery; the
// webhook configurations of WithWebhookConfigs, WithValidatingWebhooks and
// WithMutatingWebhooks exist. t.Cleanup stops the Env: every goroutine it started and every
// pod process of its node agent has ended, and its data dir is removed when the test ends.
//
// Webhooks: the test serves its own webhooks at env.WebhookServer (a free loopback port and a
// certificate in a directory, chosen by Start). Every installed webhook that names a Service,
// admission webhooks as kubebuilder's config/webhook manifests do and CRD conversion webhooks,
// is pointed there with that certificate as its caBundle, as envtest's WebhookInstallOptions
// does; webhooks that name a URL are installed as written.
//
// New starts the same Env without a testing.TB (TestMain, a Ginkgo BeforeSuite); its caller
// calls Stop.
//
// Controllers: namespace deletion and garbage collection run by default (DefaultControllers);
// WithControllers chooses others by the names of `kplane controller-manager --controllers`,
// WithoutControllers runs none. The scheduler (WithScheduler) and the node agent (WithNode),
// which runs pods as processes of this machine, are off unless asked for.
//
// Logs: the apiserver, controllers, scheduler and node agent log nothing a test sees, as
// envtest hides its kube-apiserver's and etcd's output; WithLogs(w) writes their lines to w
// while the Env runs. They log through the process's default slog.Logger, which the first
// Env replaces (once) with one that sets kplane's lines apart and passes the test's own on
// to where they went before, in the same format; so WithLogs also gets the lines of other
// Envs running at the same time.
//
// Bad input fails the test (t.Fatal) with the option, file and document at fault and the
// server's message: options that contradict each other, a path that does not exist, a file
// that does not parse, an object the server refuses. Every wait is bounded (WithTimeout).
//
// The apiserver listens on loopback over plain HTTP, with an administrator's token-less
// access: certificates would cost start time and protect nothing on a loopback socket that
// lives as long as one test.
package testenv
