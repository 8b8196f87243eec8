package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/client"
	"github.com/kplane/kplane/node/mountns"
	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// A pod's volumes live under <pod dir>/volumes/<name> (hostPath and claims: where their
// path is), prepared before its containers start and brought up to date every
// Options.VolumeSyncPeriod and when the pod's labels or annotations change; each container
// sees them at its volumeMounts through a mount namespace (node/mountns).

// podVolume is a volume of a pod ready on this node.
type podVolume struct {
	// path is where the volume's content is on the host.
	path string
	// readOnly: always mounted read-only (ConfigMap, Secret, downward API and projected
	// volumes, as the kubelet mounts them; a claim bound read-only).
	readOnly bool
}

// defaultVolumeMode is the file mode of ConfigMap, Secret, downward API and projected
// files when the pod gives none (0644, the API's default).
const defaultVolumeMode = 0o644

// tokenExpiration is the lifetime a projected service-account token is asked for when the
// pod gives none (the API's default, one hour).
const tokenExpiration = 3600

// volumeError is a volume that could not be set up, worded as the kubelet's FailedMount
// events are.
func volumeError(name string, err error) error {
	return fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", name, err)
}

// setupVolumes prepares every volume of pod and returns where each is, or an error naming
// each volume that could not be prepared (the pod's containers then wait).
func (w *podWorker) setupVolumes(ctx context.Context, pod *corev1.Pod) (map[string]podVolume, error) {
	vols := map[string]podVolume{}
	var errs []error
	for _, v := range pod.Spec.Volumes {
		pv, err := w.setupVolume(ctx, pod, v)
		if err != nil {
			errs = append(errs, volumeError(v.Name, err))
			continue
		}
		vols[v.Name] = pv
	}
	return vols, errors.Join(errs...)
}

// volumeDir is where an emptyDir volume of the pod lives, on disk as the kubelet keeps them.
func (w *podWorker) volumeDir(name string) string {
	return filepath.Join(w.a.podDir(w.uid), "volumes", name)
}

// contentDir is where the files of a ConfigMap, Secret, downward API or projected volume of
// the pod are written: in the node's tmpfs (contentRoot), so that secrets never reach the
// disk (the kubelet keeps these on tmpfs too) and writing them costs no disk metadata.
func (w *podWorker) contentDir(name string) string {
	return filepath.Join(w.a.contentRoot(), string(w.uid), name)
}

// contentRoot holds the pods' volume contents: <data-dir>/tmpfs, a tmpfs while the agent
// runs when it may mount one (prepareDirs), else a directory.
func (a *Agent) contentRoot() string { return filepath.Join(a.o.DataDir, "tmpfs") }

// scratchDir is the directory containers' mount namespaces cover with their scratch tmpfs
// (node/mountns); on the host it stays empty.
func (a *Agent) scratchDir() string { return filepath.Join(a.o.DataDir, "mountns") }

// prepareDirs makes the agent's directories and mounts the tmpfs of contentRoot, after
// unmounting what an agent that was killed left mounted under the data dir.
func (a *Agent) prepareDirs() error {
	a.unmountAll()
	for _, d := range []string{a.contentRoot(), a.scratchDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if !mountns.Privileged() {
		return nil
	}
	if err := unix.Mount("tmpfs", a.contentRoot(), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=700"); err != nil {
		return fmt.Errorf("tmpfs for volume contents: %w", err)
	}
	return nil
}

func (w *podWorker) setupVolume(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (podVolume, error) {
	dir := w.contentDir(v.Name)
	src := v.VolumeSource
	var files map[string]volumeFile
	var err error
	switch {
	case src.EmptyDir != nil:
		return podVolume{path: w.volumeDir(v.Name)}, w.emptyDir(w.volumeDir(v.Name), src.EmptyDir)
	case src.HostPath != nil:
		return podVolume{path: src.HostPath.Path}, checkHostPath(src.HostPath)
	case src.PersistentVolumeClaim != nil:
		return w.claimVolume(ctx, pod, src.PersistentVolumeClaim)
	case src.ConfigMap != nil:
		s := src.ConfigMap
		files, err = w.configMapFiles(ctx, pod.Namespace, s.Name, s.Items, s.Optional, mode(s.DefaultMode))
	case src.Secret != nil:
		s := src.Secret
		files, err = w.secretFiles(ctx, pod.Namespace, s.SecretName, s.Items, s.Optional, mode(s.DefaultMode))
	case src.DownwardAPI != nil:
		files, err = w.downwardAPIFiles(pod, src.DownwardAPI.Items, mode(src.DownwardAPI.DefaultMode))
	case src.Projected != nil:
		files, err = w.projectedFiles(ctx, pod, src.Projected)
	default:
		return podVolume{}, fmt.Errorf("this node agent does not support the volume's type")
	}
	if err != nil {
		return podVolume{}, err
	}
	return podVolume{path: dir, readOnly: true}, writeAtomic(dir, files)
}

func mode(m *int32) os.FileMode {
	if m == nil {
		return defaultVolumeMode
	}
	return os.FileMode(*m) & os.ModePerm
}

// emptyDir makes the directory; medium Memory mounts a tmpfs on it (sized by sizeLimit)
// when the agent may mount, else it stays a directory on disk.
func (w *podWorker) emptyDir(dir string, s *corev1.EmptyDirVolumeSource) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // as the kubelet: any user of the pod may write
		return err
	}
	if s.Medium != corev1.StorageMediumMemory || !mountns.Privileged() || isMountPoint(dir) {
		return nil
	}
	opts := "mode=1777"
	if s.SizeLimit != nil && !s.SizeLimit.IsZero() {
		opts += fmt.Sprintf(",size=%d", s.SizeLimit.Value())
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("tmpfs: %w", err)
	}
	return nil
}

// checkHostPath applies the hostPath type's checks (creating the path for the OrCreate types).
func checkHostPath(s *corev1.HostPathVolumeSource) error {
	t := corev1.HostPathUnset
	if s.Type != nil {
		t = *s.Type
	}
	fi, err := os.Stat(s.Path)
	missing := errors.Is(err, os.ErrNotExist)
	if err != nil && !missing {
		return err
	}
	want := func(ok bool, what string) error {
		if missing || !ok {
			return fmt.Errorf("hostPath type check failed: %s is not a %s", s.Path, what)
		}
		return nil
	}
	switch t {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if missing {
			return os.MkdirAll(s.Path, 0o755)
		}
		return want(fi.IsDir(), "directory")
	case corev1.HostPathFileOrCreate:
		if missing {
			if err := os.MkdirAll(filepath.Dir(s.Path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(s.Path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		return want(fi.Mode().IsRegular(), "file")
	case corev1.HostPathDirectory:
		return want(!missing && fi.IsDir(), "directory")
	case corev1.HostPathFile:
		return want(!missing && fi.Mode().IsRegular(), "file")
	case corev1.HostPathSocket:
		return want(!missing && fi.Mode()&os.ModeSocket != 0, "socket")
	case corev1.HostPathCharDev:
		return want(!missing && fi.Mode()&os.ModeCharDevice != 0, "character device")
	case corev1.HostPathBlockDev:
		return want(!missing && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0, "block device")
	}
	return fmt.Errorf("unknown hostPath type %q", t)
}

// claimVolume finds the directory of a claim's bound volume (a hostPath or local volume).
func (w *podWorker) claimVolume(ctx context.Context, pod *corev1.Pod, s *corev1.PersistentVolumeClaimVolumeSource) (podVolume, error) {
	claim, err := client.Resource[*corev1.PersistentVolumeClaim](w.a.c, "persistentvolumeclaims").Namespace(pod.Namespace).Get(ctx, s.ClaimName)
	if err != nil {
		return podVolume{}, err
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		return podVolume{}, fmt.Errorf("persistentvolumeclaim %q is not bound", s.ClaimName)
	}
	pv, err := client.Resource[*corev1.PersistentVolume](w.a.c, "persistentvolumes").Get(ctx, claim.Spec.VolumeName)
	if err != nil {
		return podVolume{}, err
	}
	switch {
	case pv.Spec.HostPath != nil:
		if err := checkHostPath(pv.Spec.HostPath); err != nil {
			return podVolume{}, err
		}
		return podVolume{path: pv.Spec.HostPath.Path, readOnly: s.ReadOnly}, nil
	case pv.Spec.Local != nil:
		if _, err := os.Stat(pv.Spec.Local.Path); err != nil {
			return podVolume{}, err
		}
		return podVolume{path: pv.Spec.Local.Path, readOnly: s.ReadOnly}, nil
	}
	return podVolume{}, fmt.Errorf("persistentvolume %q: this node agent mounts hostPath and local volumes only", pv.Name)
}

// keyFiles turns an object's keys into files: all keys, or the items listed (each to its
// path, with its mode); a listed key that is missing is an error unless optional.
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = volumeFile{data: v, mode: def}
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("%s %q references non-existent key: %s", kind, name, it.Key)
		}
		files[it.Path] = volumeFile{data: v, mode: modeOr(it.Mode, def)}
	}
	return files, nil
}

func modeOr(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & os.ModePerm
}

func (w *podWorker) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]volumeFile, error) {
	cm, err := client.Resource[*corev1.ConfigMap](w.a.c, "configmaps").Namespace(ns).Get(ctx, name)
	if client.IsNotFound(err) {
		if optional != nil && *optional {
			return map[string]volumeFile{}, nil
		}
		return nil, fmt.Errorf("configmap %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return keyFiles("configmap", name, data, items, optional, def)
}

func (w *podWorker) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]volumeFile, error) {
	s, err := client.Resource[*corev1.Secret](w.a.c, "secrets").Namespace(ns).Get(ctx, name)
	if client.IsNotFound(err) {
		if optional != nil && *optional {
			return map[string]volumeFile{}, nil
		}
		return nil, fmt.Errorf("secret %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	return keyFiles("secret", name, s.Data, items, optional, def)
}

// downwardAPIFiles writes the pod's fields and its containers' resources, one per item.
func (w *podWorker) downwardAPIFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def os.FileMode) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	for _, it := range items {
		var value string
		var err error
		switch {
		case it.FieldRef != nil:
			switch it.FieldRef.FieldPath {
			case "metadata.labels":
				value = formatMap(pod.Labels)
			case "metadata.annotations":
				value = formatMap(pod.Annotations)
			default:
				value, err = podField(pod, w.ip, it.FieldRef.FieldPath)
			}
		case it.ResourceFieldRef != nil:
			value, err = containerResource(pod, it.ResourceFieldRef, nil, w.a.allocatable())
		default:
			err = fmt.Errorf("item %s has neither fieldRef nor resourceFieldRef", it.Path)
		}
		if err != nil {
			return nil, err
		}
		files[it.Path] = volumeFile{data: []byte(value), mode: modeOr(it.Mode, def)}
	}
	return files, nil
}

// formatMap writes labels or annotations as the downward API does: key="value" lines,
// sorted, the value quoted.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// projectedFiles puts the sources of a projected volume into one directory.
func (w *podWorker) projectedFiles(ctx context.Context, pod *corev1.Pod, p *corev1.ProjectedVolumeSource) (map[string]volumeFile, error) {
	def := mode(p.DefaultMode)
	files := map[string]volumeFile{}
	for _, s := range p.Sources {
		var part map[string]volumeFile
		var err error
		switch {
		case s.ConfigMap != nil:
			part, err = w.configMapFiles(ctx, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, def)
		case s.Secret != nil:
			part, err = w.secretFiles(ctx, pod.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional, def)
		case s.DownwardAPI != nil:
			part, err = w.downwardAPIFiles(pod, s.DownwardAPI.Items, def)
		case s.ServiceAccountToken != nil:
			var token string
			token, err = w.token(ctx, pod, s.ServiceAccountToken)
			part = map[string]volumeFile{s.ServiceAccountToken.Path: {data: []byte(token), mode: def}}
		default:
			err = errors.New("this node agent supports configMap, secret, downwardAPI and serviceAccountToken projections only")
		}
		if err != nil {
			return nil, err
		}
		maps.Copy(files, part)
	}
	return files, nil
}

// cachedToken is a service-account token the agent got for a pod, kept until it is due
// for renewal.
type cachedToken struct {
	token      string
	renewAfter time.Time
}

// token returns a token of the pod's service account for the projection, bound to the pod,
// asking the API (TokenRequest) for a new one once 80% of the last one's lifetime has
// passed, as the kubelet does.
func (w *podWorker) token(ctx context.Context, pod *corev1.Pod, s *corev1.ServiceAccountTokenProjection) (string, error) {
	exp := int64(tokenExpiration)
	if s.ExpirationSeconds != nil {
		exp = *s.ExpirationSeconds
	}
	key := s.Audience + "/" + fmt.Sprint(exp)
	now := w.a.clock.Now()
	if t, ok := w.tokens[key]; ok && now.Before(t.renewAfter) {
		return t.token, nil
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if s.Audience != "" {
		req.Spec.Audiences = []string{s.Audience}
	}
	out := &authenticationv1.TokenRequest{}
	err := client.Resource[*corev1.ServiceAccount](w.a.c, "serviceaccounts").Namespace(pod.Namespace).CreateSubresource(ctx, sa, "token", req, out)
	if err != nil {
		return "", fmt.Errorf("failed to fetch token: %w", err)
	}
	lifetime := out.Status.ExpirationTimestamp.Sub(now)
	if lifetime <= 0 {
		lifetime = time.Duration(exp) * time.Second
	}
	w.tokens[key] = cachedToken{token: out.Status.Token, renewAfter: now.Add(lifetime * 8 / 10)}
	return out.Status.Token, nil
}

// containerResource is a container's resource (limits.cpu, requests.memory, ...) divided by
// the divisor and rounded up, as the downward API gives it; a limit not set is the node's
// (node, its allocatable). self is the container the reference is made in (an env var's;
// nil for a volume), the one meant when the reference names none.
func containerResource(pod *corev1.Pod, ref *corev1.ResourceFieldSelector, self *corev1.Container, node corev1.ResourceList) (string, error) {
	spec := self
	if ref.ContainerName != "" && (self == nil || ref.ContainerName != self.Name) {
		spec = nil
		for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
			if c.Name == ref.ContainerName {
				spec = &c
				break
			}
		}
	}
	if spec == nil {
		return "", fmt.Errorf("resourceFieldRef: no container %q in the pod", ref.ContainerName)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	known := name == "cpu" || name == "memory" || name == "ephemeral-storage" || strings.HasPrefix(name, "hugepages-")
	if !ok || !known || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported container resource %q", ref.Resource)
	}
	list := spec.Resources.Requests
	if kind == "limits" {
		list = spec.Resources.Limits
	}
	q, set := list[corev1.ResourceName(name)]
	if !set && kind == "limits" {
		q = node[corev1.ResourceName(name)]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	v := float64(q.MilliValue()) / float64(divisor.MilliValue())
	return fmt.Sprint(int64(math.Ceil(v))), nil
}

// isMountPoint says whether dir is the mount point of a mount of the agent's namespace.
func isMountPoint(dir string) bool {
	return slices.Contains(mountsUnder(dir), dir)
}

// mountsUnder lists the agent's mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(x, y string) int { return len(y) - len(x) })
	return out
}

// unescapeMountPath undoes mountinfo's octal escapes of spaces, tabs, newlines, backslashes.
func unescapeMountPath(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(p)
}

// unmountAll unmounts what the agent mounted under its data dir: the volume contents' tmpfs
// and memory-backed emptyDirs.
func (a *Agent) unmountAll() {
	for _, m := range mountsUnder(a.o.DataDir) {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
}

// removePodDirs removes the pod's directory, after unmounting what the agent mounted in it
// (emptyDir tmpfs), and its volumes' contents.
func (a *Agent) removePodDirs(uid types.UID) error {
	dir := a.podDir(uid)
	for _, m := range mountsUnder(dir) {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	return errors.Join(os.RemoveAll(dir), os.RemoveAll(filepath.Join(a.contentRoot(), string(uid))))
}
