package node

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kplane/kplane/cache"
	"github.com/kplane/kplane/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// hostIP is the node's address as pods see it (status.hostIP); the agent runs pods on
// loopback addresses of this machine.
const hostIP = "127.0.0.1"

// envTimeout bounds the API reads of one container's environment, so that a slow API server
// delays the worker (which also handles the pod's deletion) by a bounded time only.
const envTimeout = 10 * time.Second

// configError is a failure to build a container's configuration (a missing ConfigMap, Secret
// or key, an unsupported field): the container is not created, its status waits with reason
// CreateContainerConfigError, and the start is retried as it is, not counted as a restart.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// objectSource reads the ConfigMaps and Secrets a container's environment refers to, and the
// Services whose variables it gets; an interface so that the resolution can be tested without
// an API server.
type objectSource interface {
	configMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error)
	secret(ctx context.Context, ns, name string) (*corev1.Secret, error)
	servicesIn(ctx context.Context, ns string) ([]*corev1.Service, error)
}

// apiObjects reads through the agent's client. ConfigMaps and Secrets are read from the API
// server each time, not from a cache: a container start is rare, a fresh read sees a
// just-created ConfigMap, and a node has no business holding every Secret of the cluster.
// Services come from the agent's informer once it has synced (the kubelet watches them all
// for the same purpose: every container start needs them), from a LIST before.
type apiObjects struct {
	c        *client.Client
	services *cache.Informer[*corev1.Service] // nil: always LIST
}

func (s apiObjects) configMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return client.Resource[*corev1.ConfigMap](s.c, "configmaps").Namespace(ns).Get(ctx, name)
}

func (s apiObjects) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return client.Resource[*corev1.Secret](s.c, "secrets").Namespace(ns).Get(ctx, name)
}

func (s apiObjects) servicesIn(ctx context.Context, ns string) ([]*corev1.Service, error) {
	if s.services != nil && s.services.HasSynced() {
		return s.services.Lister().Namespace(ns).List(labels.Everything()), nil
	}
	list, err := client.Resource[*corev1.Service](s.c, "services").Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// containerEnv returns a container's process environment (KEY=VALUE) and its argv (command
// then args, $(VAR) references expanded against that environment, as the kubelet does); dir
// is its HOME. An error is a *configError.
func (a *Agent) containerEnv(ctx context.Context, pod *corev1.Pod, podIP string, spec corev1.Container, dir string) (env, argv []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, envTimeout)
	defer cancel()
	vars, err := resolveEnv(ctx, apiObjects{a.c, a.services}, pod, podIP, spec, a.allocatable())
	if err != nil {
		return nil, nil, &configError{err}
	}
	lookup := vars.lookup
	for _, s := range spec.Command {
		argv = append(argv, expand(s, lookup))
	}
	for _, s := range spec.Args {
		argv = append(argv, expand(s, lookup))
	}
	// PATH and HOME play the part of an image's environment, HOSTNAME the runtime's (the
	// pod's hostname, as containerd sets it): present unless the container sets them, but not
	// something $(VAR) can refer to.
	for _, kv := range []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "HOSTNAME=" + podHostname(pod)} {
		if _, set := vars.values[kv[:strings.IndexByte(kv, '=')]]; !set {
			env = append(env, kv)
		}
	}
	for _, k := range vars.names {
		env = append(env, k+"="+vars.values[k])
	}
	return env, argv, nil
}

// podHostname is the pod's hostname: spec.hostname, else its name cut to a DNS label's 63
// characters, as the kubelet chooses it.
func podHostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	return strings.TrimRight(pod.Name[:min(len(pod.Name), 63)], "-.")
}

// envVars is an environment being built: names in the order first defined, a later
// definition of a name replacing its value in place.
type envVars struct {
	names  []string
	values map[string]string
}

func (e *envVars) set(k, v string) {
	if _, ok := e.values[k]; !ok {
		e.names = append(e.names, k)
	}
	e.values[k] = v
}

func (e *envVars) lookup(k string) (string, bool) {
	v, ok := e.values[k]
	return v, ok
}

// readOnce returns a reader of ns's objects of one kind that reads each name from the API at
// most once; an optional object that does not exist reads as the zero T (nil) without error.
func readOnce[T any](ctx context.Context, ns, kind string, read func(context.Context, string, string) (T, error)) func(name string, optional *bool) (T, error) {
	seen := map[string]T{}
	return func(name string, optional *bool) (T, error) {
		var none T
		if obj, ok := seen[name]; ok {
			return obj, nil
		}
		obj, err := read(ctx, ns, name)
		if client.IsNotFound(err) {
			if optional != nil && *optional {
				return none, nil
			}
			return none, fmt.Errorf("%s %q not found", kind, name)
		}
		if err != nil {
			return none, fmt.Errorf("reading %s %q: %w", kind, name, err)
		}
		seen[name] = obj
		return obj, nil
	}
}

// resolveEnv builds a container's environment the way the kubelet does: envFrom sources in
// order, then env in order, each value's $(VAR) references resolved against what is defined
// before it and then the service variables (serviceEnv), which come last unless the
// container defines them itself. POD_IP, POD_NAME and POD_NAMESPACE come first, as if the pod
// had declared them, so the container can override them and refer to them.
func resolveEnv(ctx context.Context, src objectSource, pod *corev1.Pod, podIP string, spec corev1.Container, node corev1.ResourceList) (*envVars, error) {
	links, err := serviceEnv(ctx, src, pod)
	if err != nil {
		return nil, err
	}
	vars := &envVars{values: map[string]string{}}
	vars.set("POD_IP", podIP)
	vars.set("POD_NAME", pod.Name)
	vars.set("POD_NAMESPACE", pod.Namespace)
	lookup := func(k string) (string, bool) {
		if v, ok := vars.lookup(k); ok {
			return v, ok
		}
		return links.lookup(k)
	}
	ns := pod.Namespace
	// Each object is read once per container, so that all its keys come from one version.
	getConfigMap := readOnce(ctx, ns, "configmap", src.configMap)
	getSecret := readOnce(ctx, ns, "secret", src.secret)

	for _, from := range spec.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := getConfigMap(from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
			if err != nil {
				return nil, err
			}
			if cm == nil {
				continue
			}
			// Sorted: a map's order would make the environment differ from start to start.
			for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
				vars.set(from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			s, err := getSecret(from.SecretRef.Name, from.SecretRef.Optional)
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue
			}
			for _, k := range slices.Sorted(maps.Keys(s.Data)) {
				vars.set(from.Prefix+k, string(s.Data[k]))
			}
		}
	}

	for _, e := range spec.Env {
		value := e.Value
		switch from := e.ValueFrom; {
		case value != "" || from == nil:
			value = expand(value, lookup)
		case from.FieldRef != nil:
			v, err := podField(pod, podIP, from.FieldRef.FieldPath)
			if err != nil {
				return nil, err
			}
			value = v
		case from.ConfigMapKeyRef != nil:
			ref := from.ConfigMapKeyRef
			cm, err := getConfigMap(ref.Name, ref.Optional)
			if err != nil {
				return nil, err
			}
			if cm == nil {
				continue // optional and missing: the variable is not set at all
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, ns, ref.Name)
			}
			value = v
		case from.SecretKeyRef != nil:
			ref := from.SecretKeyRef
			s, err := getSecret(ref.Name, ref.Optional)
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, ns, ref.Name)
			}
			value = string(v)
		case from.ResourceFieldRef != nil:
			v, err := containerResource(pod, from.ResourceFieldRef, &spec, node)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			value = v
		default:
			return nil, fmt.Errorf("env %s: unsupported valueFrom", e.Name)
		}
		vars.set(e.Name, value)
	}
	for _, k := range links.names {
		if _, set := vars.values[k]; !set {
			vars.set(k, links.values[k])
		}
	}
	return vars, nil
}

// masterServices are the services of the default namespace whose variables every pod gets,
// whatever its enableServiceLinks: the API server's own (what rest.InClusterConfig reads).
var masterServices = []string{"kubernetes"}

// serviceEnv returns the service variables of a pod as the kubelet makes them: those of the
// kubernetes service in default always, and, unless spec.enableServiceLinks is false, those
// of every service of the pod's namespace (which win over default's of the same name). A
// service without a ClusterIP (headless) gives none. Services are in name order, so a
// container's environment is the same from start to start.
func serviceEnv(ctx context.Context, src objectSource, pod *corev1.Pod) (*envVars, error) {
	chosen := map[string]*corev1.Service{}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	if pod.Namespace != metav1.NamespaceDefault || !links {
		svcs, err := src.servicesIn(ctx, metav1.NamespaceDefault)
		if err != nil {
			return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
		}
		for _, s := range svcs {
			if slices.Contains(masterServices, s.Name) {
				chosen[s.Name] = s
			}
		}
	}
	if links {
		svcs, err := src.servicesIn(ctx, pod.Namespace)
		if err != nil {
			return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
		}
		for _, s := range svcs {
			chosen[s.Name] = s
		}
	}
	out := &envVars{values: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(chosen)) {
		serviceVars(out, chosen[name])
	}
	return out, nil
}

// serviceVars adds one service's variables: <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT (the first
// port), <NAME>_SERVICE_PORT_<PORT NAME> for each named port, and the Docker link variables
// <NAME>_PORT and <NAME>_PORT_<port>_<PROTOCOL>[_PROTO|_PORT|_ADDR]; names upper-cased, "-" as "_".
func serviceVars(out *envVars, s *corev1.Service) {
	ip := s.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
		return
	}
	prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
	out.set(prefix+"_SERVICE_HOST", ip)
	out.set(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			out.set(prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port)))
		}
	}
	for i, p := range s.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		url := proto + "://" + net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
		if i == 0 {
			out.set(prefix+"_PORT", url)
		}
		port := prefix + "_PORT_" + strconv.Itoa(int(p.Port)) + "_" + strings.ToUpper(proto)
		out.set(port, url)
		out.set(port+"_PROTO", proto)
		out.set(port+"_PORT", strconv.Itoa(int(p.Port)))
		out.set(port+"_ADDR", ip)
	}
}

// podField is the value of a downward API field path for an env var (fieldRef).
func podField(pod *corev1.Pod, podIP, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs": // one address per pod, so the list is that address
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if key, ok := subscript(path, prefix); ok {
			return m[key], nil // a missing label is an empty value, not an error
		}
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// subscript returns k from prefix['k'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// expand replaces each $(NAME) in s with NAME's value when lookup knows it; an unknown
// reference is left as written, "$$" is an escaped "$", and a "$" starting neither stays.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 { // unterminated: "$(" is literal, the rest is read on
				b.WriteString("$(")
				i++
				continue
			}
			ref := s[i : i+3+end]
			if v, ok := lookup(ref[2 : len(ref)-1]); ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += len(ref) - 1
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
