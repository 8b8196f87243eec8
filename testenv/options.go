package testenv

import (
	"errors"
	"fmt"
	"io"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Option changes how Start sets up an Env.
type Option func(*settings)

// settings are the options of one Start, checked together by validate.
type settings struct {
	crdPaths     []string
	crds         []*apiextensionsv1.CustomResourceDefinition
	webhookPaths []string
	validating   []*admissionregistrationv1.ValidatingWebhookConfiguration
	mutating     []*admissionregistrationv1.MutatingWebhookConfiguration
	controllers  []string // nil: DefaultControllers
	noControllers,
	scheduler,
	node bool
	timeout time.Duration
	logs    io.Writer
	logsSet bool
}

// DefaultControllers run unless WithControllers or WithoutControllers says otherwise: the
// two whose absence surprises envtest users most, namespaces that never finish deleting and
// owned objects that are never collected.
var DefaultControllers = []string{"namespace", "garbagecollector"}

// DefaultTimeout bounds each wait of Start (the apiserver's readiness, each CRD becoming
// Established) unless WithTimeout says otherwise.
const DefaultTimeout = 30 * time.Second

// WithCRDs installs the CustomResourceDefinitions in paths before Start returns: each path is
// a file or a directory, whose .yaml, .yml and .json files are read (not its subdirectories).
// A file may hold several YAML documents; documents of other kinds are skipped (a
// kustomization.yaml beside the CRDs, as envtest does), documents that do not parse fail the
// test naming the file.
func WithCRDs(paths ...string) Option {
	return func(s *settings) { s.crdPaths = append(s.crdPaths, paths...) }
}

// WithCRDObjects installs the given CustomResourceDefinitions before Start returns.
func WithCRDObjects(crds ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(s *settings) { s.crds = append(s.crds, crds...) }
}

// WithWebhookConfigs creates the ValidatingWebhookConfigurations and
// MutatingWebhookConfigurations in paths (files or directories, read as WithCRDs reads them)
// before Start returns.
func WithWebhookConfigs(paths ...string) Option {
	return func(s *settings) { s.webhookPaths = append(s.webhookPaths, paths...) }
}

// WithValidatingWebhooks creates the given ValidatingWebhookConfigurations before Start returns.
func WithValidatingWebhooks(configs ...*admissionregistrationv1.ValidatingWebhookConfiguration) Option {
	return func(s *settings) { s.validating = append(s.validating, configs...) }
}

// WithMutatingWebhooks creates the given MutatingWebhookConfigurations before Start returns.
func WithMutatingWebhooks(configs ...*admissionregistrationv1.MutatingWebhookConfiguration) Option {
	return func(s *settings) { s.mutating = append(s.mutating, configs...) }
}

// WithControllers runs exactly the named controllers of kplane's controller manager instead of
// DefaultControllers, with kube-controller-manager's --controllers syntax: a name, "-name", or
// "*" for every controller on by default in `kplane controller-manager`.
func WithControllers(names ...string) Option {
	return func(s *settings) { s.controllers = append(s.controllers, names...) }
}

// WithoutControllers runs no controller manager: a bare apiserver, as envtest's.
func WithoutControllers() Option {
	return func(s *settings) { s.noControllers = true }
}

// WithScheduler runs kplane's scheduler, which binds pods to nodes.
func WithScheduler() Option {
	return func(s *settings) { s.scheduler = true }
}

// WithNode runs kplane's node agent: a Node that runs its pods' containers as processes of
// this machine. With WithScheduler, pods run; a pod that mounts its service-account token
// (the default) also needs the namespace's ServiceAccount, made by the serviceaccount
// controller (WithControllers("*"), or name it beside DefaultControllers).
func WithNode() Option {
	return func(s *settings) { s.node = true }
}

// WithTimeout bounds each wait of Start instead of DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) { s.timeout = d }
}

// WithLogs writes the log lines of kplane's apiserver, controllers, scheduler and node agent
// to w, in `kplane`'s format (slog's text), while this Env runs. Without it they are
// discarded, as envtest discards its kube-apiserver's and etcd's output; the test's own log
// lines are left alone. The components log through the process's default slog.Logger, so w
// also gets the lines of other Envs running at the same time: to read one Env's, run its test
// alone. WithLogs(os.Stderr) shows them as `kplane up` would.
func WithLogs(w io.Writer) Option {
	return func(s *settings) { s.logs, s.logsSet = w, true }
}

// validate reports options that contradict each other.
func (s *settings) validate() error {
	var errs []error
	if s.noControllers && s.controllers != nil {
		errs = append(errs, fmt.Errorf("WithoutControllers conflicts with WithControllers(%q)", s.controllers))
	}
	if s.timeout <= 0 {
		errs = append(errs, fmt.Errorf("WithTimeout(%v): the timeout must be positive", s.timeout))
	}
	if s.logsSet && s.logs == nil {
		errs = append(errs, errors.New("WithLogs: a nil writer"))
	}
	for _, c := range s.crds {
		if c == nil {
			errs = append(errs, errors.New("WithCRDObjects: a nil CustomResourceDefinition"))
		}
	}
	for _, c := range s.validating {
		if c == nil {
			errs = append(errs, errors.New("WithValidatingWebhooks: a nil configuration"))
		}
	}
	for _, c := range s.mutating {
		if c == nil {
			errs = append(errs, errors.New("WithMutatingWebhooks: a nil configuration"))
		}
	}
	return errors.Join(errs...)
}
