//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"
)

// helmTimeout bounds each Helm action, its wait for readiness included.
const helmTimeout = 60 * time.Second

// TestHelmChartLifecycle drives the chart `helm create` writes through its life with Helm 4's
// Go SDK against `kplane up`, the way `helm install --wait` etc. would: server-side apply (Helm
// 4's default) and the kstatus watcher waiting for readiness. Installed, the Deployment's pod
// is Ready and its Service answers HTTP through the proxy; upgraded to two replicas of another
// image tag, revision 2 runs only new pods; rolled back, revision 3 is revision 1 again;
// scaled with kubectl, the next upgrade conflicts on .spec.replicas until forced, and no pod
// start left a Warning event; the chart's test hook (wget of the Service) passes;
// uninstalled, every object of the chart and the release history are gone.
//
// kplane's node agent runs a container's command, not its image, so the chart's values point
// the image at kplane/echo and its port at 8080, and a post-renderer (Helm's own hook for
// changing rendered manifests) gives the Deployment's container `kplane echo` as its command
// and the test pod the Service's address from its environment (there is no cluster DNS).
func TestHelmChartLifecycle(t *testing.T) {
	dir := t.TempDir()
	up := startRole(t, "up", "--secure-port", "0", "--data-dir", dir)
	up.waitLog(t, "kplane is up")
	const ns, name = "helm", "web"
	k := kc{t: t, ns: ns, kubeconfig: filepath.Join(dir, "kubeconfig")}

	chartDir, err := chartutil.Create(name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, k.kubeconfig, ns)
	values := func(tag string, replicas int) map[string]any {
		return map[string]any{
			"replicaCount": replicas,
			"image":        map[string]any{"repository": "kplane/echo", "tag": tag},
			"service":      map[string]any{"port": 8080},
		}
	}
	url := func() string { return "http://" + k.jsonpath("service/"+name, "{.spec.clusterIP}") + ":8080/" }
	expectRunning := func(when, image string, replicas int) []string {
		t.Helper()
		k.expectJSONPath("deployment/"+name, "{.spec.replicas} {.spec.template.spec.containers[0].image} {.status.readyReplicas}",
			fmt.Sprintf("%d %s %d", replicas, image, replicas))
		pods := k.currentPods()
		if len(pods) != replicas {
			t.Fatalf("%s: pods %v, want %d", when, pods, replicas)
		}
		for _, p := range pods {
			k.expectJSONPath("pod/"+p, `{.spec.containers[0].image} {.status.conditions[?(@.type=="Ready")].status}`, image+" True")
		}
		expectEveryPodAnswers(t, when, url(), pods)
		return pods
	}

	var installed *release.Release
	runSteps(t, []step{
		{"install", func(t *testing.T) {
			install := action.NewInstall(cfg)
			install.ReleaseName, install.Namespace, install.CreateNamespace = name, ns, true
			install.WaitStrategy, install.Timeout = kube.StatusWatcherStrategy, helmTimeout
			install.PostRenderer = kplaneCommands{}
			rel, err := install.Run(chart, values("v1", 1))
			if err != nil {
				t.Fatal(err)
			}
			installed = asRelease(t, rel)
			expectRelease(t, installed, 1, common.StatusDeployed)
			if !install.ServerSideApply || installed.ApplyMethod != "ssa" {
				t.Errorf("install applied with %q, want server-side apply (Helm 4's default)", installed.ApplyMethod)
			}
			expectRunning("after install", "kplane/echo:v1", 1)
			// Helm's field manager owns what it applied.
			expectContains(t, "managedFields", k.jsonpath("deployment/"+name, `{.metadata.managedFields[?(@.operation=="Apply")].manager}`), "helm")
		}},
		{"upgrade", func(t *testing.T) {
			before := k.currentPods()
			upgrade := action.NewUpgrade(cfg)
			upgrade.Namespace, upgrade.WaitStrategy, upgrade.Timeout = ns, kube.StatusWatcherStrategy, helmTimeout
			upgrade.PostRenderer = kplaneCommands{}
			rel, err := upgrade.Run(name, chart, values("v2", 2))
			if err != nil {
				t.Fatal(err)
			}
			expectRelease(t, asRelease(t, rel), 2, common.StatusDeployed)
			for _, p := range expectRunning("after upgrade", "kplane/echo:v2", 2) {
				if slices.Contains(before, p) {
					t.Errorf("pod %s of revision 1 still current after the upgrade", p)
				}
			}
		}},
		{"rollback", func(t *testing.T) {
			rollback := action.NewRollback(cfg)
			rollback.Version, rollback.WaitStrategy, rollback.Timeout = 1, kube.StatusWatcherStrategy, helmTimeout
			if err := rollback.Run(name); err != nil {
				t.Fatal(err)
			}
			history, err := action.NewHistory(cfg).Run(name)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range history {
				r := asRelease(t, r)
				got = append(got, fmt.Sprintf("%d:%s", r.Version, r.Info.Status))
			}
			slices.Sort(got)
			if want := []string{"1:superseded", "2:superseded", "3:deployed"}; !slices.Equal(got, want) {
				t.Errorf("history %v, want %v", got, want)
			}
			status, err := action.NewStatus(cfg).Run(name)
			if err != nil {
				t.Fatal(err)
			}
			current := asRelease(t, status)
			expectRelease(t, current, 3, common.StatusDeployed)
			// Values read back from the release record are JSON numbers: compared as printed.
			if fmt.Sprint(current.Config) != fmt.Sprint(installed.Config) {
				t.Errorf("revision 3's values %v, want revision 1's %v", current.Config, installed.Config)
			}
			if current.Manifest != installed.Manifest {
				t.Errorf("revision 3's manifest differs from revision 1's:\n%s\n--- revision 1 ---\n%s", current.Manifest, installed.Manifest)
			}
			expectRunning("after rollback", "kplane/echo:v1", 1)
		}},
		{"a field scaled by kubectl conflicts until forced", func(t *testing.T) {
			k.ok("scale", "deployment/"+name, "--replicas=3")
			upgrade := action.NewUpgrade(cfg)
			upgrade.Namespace, upgrade.WaitStrategy, upgrade.Timeout = ns, kube.StatusWatcherStrategy, helmTimeout
			upgrade.PostRenderer = kplaneCommands{}
			_, err := upgrade.Run(name, chart, values("v1", 1))
			if err == nil || !strings.Contains(err.Error(), `conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas`) {
				t.Fatalf("upgrade over kubectl's replicas: %v, want a conflict on .spec.replicas", err)
			}
			upgrade.ForceConflicts = true
			rel, err := upgrade.Run(name, chart, values("v1", 1))
			if err != nil {
				t.Fatal(err)
			}
			expectRelease(t, asRelease(t, rel), 5, common.StatusDeployed)
			expectRunning("after the forced upgrade", "kplane/echo:v1", 1)
			// Five rollouts of pods whose liveness probe has no initial delay, and not one
			// Unhealthy event: the first liveness run waits a period, as the kubelet's does.
			if warnings := k.ok("get", "events", "--field-selector", "type=Warning", "-o", "name"); warnings != "" {
				t.Errorf("warning events:\n%s", k.ok("get", "events", "--field-selector", "type=Warning"))
			}
		}},
		{"test hook", func(t *testing.T) {
			test := action.NewReleaseTesting(cfg)
			test.Namespace, test.Timeout = ns, helmTimeout
			rel, shutdown, err := test.Run(name)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = shutdown() }()
			var ran []string
			for _, h := range asRelease(t, rel).Hooks {
				ran = append(ran, fmt.Sprintf("%s %s", h.Name, h.LastRun.Phase))
			}
			if want := []string{name + "-test-connection Succeeded"}; !slices.Equal(ran, want) {
				t.Errorf("test hooks ran %v, want %v", ran, want)
			}
			k.expectJSONPath("pod/"+name+"-test-connection", "{.status.phase}", "Succeeded")
		}},
		{"uninstall", func(t *testing.T) {
			uninstall := action.NewUninstall(cfg)
			uninstall.WaitStrategy, uninstall.Timeout = kube.StatusWatcherStrategy, helmTimeout
			if _, err := uninstall.Run(name); err != nil {
				t.Fatal(err)
			}
			if _, err := action.NewHistory(cfg).Run(name); !errors.Is(err, driver.ErrReleaseNotFound) {
				t.Errorf("history after uninstall: %v, want %v", err, driver.ErrReleaseNotFound)
			}
			// The test hook's pod stays, as `helm uninstall` leaves it on Kubernetes too (its
			// hook-delete-policy is the default, before-hook-creation).
			until(t, "every object of the chart gone", func() error {
				left := strings.Fields(k.ok("get", "all,serviceaccounts", "-l", "app.kubernetes.io/instance="+name, "-o", "name"))
				if left = slices.DeleteFunc(left, func(s string) bool { return s == "pod/"+name+"-test-connection" }); len(left) > 0 {
					return fmt.Errorf("left: %v", left)
				}
				return nil
			})
		}},
	})
}

// helmConfig is the action configuration `helm --kubeconfig kubeconfig -n ns` would use:
// release records in Secrets, field manager "helm", Helm's log kept for the test's failure
// report.
func helmConfig(t *testing.T, kubeconfig, ns string) *action.Configuration {
	t.Helper()
	kube.ManagedFieldsManager = "helm" // as the helm command sets it
	flags := genericclioptions.NewConfigFlags(true)
	cacheDir := t.TempDir()
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &kubeconfig, &ns, &cacheDir
	log := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helm's log:\n%s", log.String())
		}
	})
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// kplaneCommands is a Helm post-renderer giving the chart's containers commands kplane's node
// agent can run: `kplane echo` for the Deployment's, and for the test hook's wget the
// Service's address from its environment variables instead of its DNS name.
type kplaneCommands struct{}

func (kplaneCommands) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	var out bytes.Buffer
	for doc := range strings.SplitSeq(rendered.String(), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, err
		}
		switch obj["kind"] {
		case "Deployment":
			for _, c := range containers(obj, "spec", "template", "spec") {
				c["command"] = []any{"kplane", "echo", "--port=8080"}
			}
		case "Pod":
			for _, c := range containers(obj, "spec") {
				c["args"] = []any{"$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"}
			}
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(data)
	}
	return &out, nil
}

// containers returns the containers of the pod spec at path in obj.
func containers(obj map[string]any, path ...string) []map[string]any {
	spec := obj
	for _, p := range path {
		spec, _ = spec[p].(map[string]any)
	}
	list, _ := spec["containers"].([]any)
	var out []map[string]any
	for _, c := range list {
		if c, ok := c.(map[string]any); ok {
			out = append(out, c)
		}
	}
	return out
}

func asRelease(t *testing.T, r any) *release.Release {
	t.Helper()
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("release of type %T", r)
	}
	return rel
}

func expectRelease(t *testing.T, rel *release.Release, version int, status common.Status) {
	t.Helper()
	if rel.Version != version || rel.Info.Status != status {
		t.Errorf("release %s: revision %d %s, want revision %d %s", rel.Name, rel.Version, rel.Info.Status, version, status)
	}
}
