package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const applyYAML = "application/apply-patch+yaml"

// webDeployment is an apply configuration of a Deployment named web.
func webDeployment(replicas int, image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: %s
`, replicas, image)
}

// managers lists "manager/operation/subresource" for each managedFields entry, sorted.
func managers(t *testing.T, obj map[string]any) []string {
	t.Helper()
	raw, _ := json.Marshal(get(obj, "metadata", "managedFields"))
	var entries []metav1.ManagedFieldsEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
	}
	sort.Strings(out)
	return out
}

// owns reports whether manager's entry covers the field named by its fieldsV1 key (e.g. "f:replicas").
func owns(obj map[string]any, manager, key string) bool {
	entries, _ := get(obj, "metadata", "managedFields").([]any)
	for _, e := range entries {
		if get(e, "manager") == manager {
			raw, _ := json.Marshal(get(e, "fieldsV1"))
			if strings.Contains(string(raw), `"`+key+`"`) {
				return true
			}
		}
	}
	return false
}

func TestServerSideApply(t *testing.T) {
	ns := namespace(t)
	base := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	apply := func(manager, body string, query ...string) response {
		q := "?fieldManager=" + manager
		for _, x := range query {
			q += "&" + x
		}
		return do(t, "PATCH", base+"/web"+q, body, "Content-Type", applyYAML)
	}

	// Create by apply, then apply again with a change: one Apply entry, alice's.
	r := apply("alice", webDeployment(3, "nginx:1"))
	if r.code != http.StatusCreated {
		t.Fatalf("apply create: %d %s", r.code, r.body)
	}
	obj := r.object(t)
	entry := get(obj, "metadata", "managedFields", 0).(map[string]any)
	if entry["manager"] != "alice" || entry["operation"] != "Apply" || entry["apiVersion"] != "apps/v1" || entry["fieldsType"] != "FieldsV1" || entry["time"] == nil {
		t.Fatalf("managedFields entry: %v", entry)
	}
	if r = apply("alice", webDeployment(3, "nginx:2")); r.code != http.StatusOK || get(r.object(t), "spec", "template", "spec", "containers", 0, "image") != "nginx:2" {
		t.Fatalf("apply update: %d %s", r.code, r.body)
	}
	rv := get(r.object(t), "metadata", "resourceVersion")

	// bob's other replicas conflict; nothing is stored.
	r = apply("bob", webDeployment(5, "nginx:2"))
	var st metav1.Status
	_ = json.Unmarshal(r.body, &st)
	if r.code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict ||
		st.Message != `Apply failed with 1 conflict: conflict with "alice": .spec.replicas` ||
		st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != ".spec.replicas" ||
		st.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict || st.Details.Causes[0].Message != `conflict with "alice"` {
		t.Fatalf("conflict: %d %s", r.code, r.body)
	}
	if cur := do(t, "GET", base+"/web", nil).object(t); get(cur, "metadata", "resourceVersion") != rv {
		t.Fatalf("a conflicting apply changed the object")
	}

	// The same value is shared: bob co-owns the image with alice.
	if r = apply("bob", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: web, image: 'nginx:2'}]}}}\n"); r.code != http.StatusOK {
		t.Fatalf("shared apply: %d %s", r.code, r.body)
	}
	if obj = r.object(t); !owns(obj, "alice", "f:image") || !owns(obj, "bob", "f:image") {
		t.Fatalf("image not shared: %s", r.body)
	}

	// force takes replicas from alice.
	if r = apply("bob", webDeployment(5, "nginx:2"), "force=true"); r.code != http.StatusOK || get(r.object(t), "spec", "replicas") != 5.0 {
		t.Fatalf("forced apply: %d %s", r.code, r.body)
	}
	if obj = r.object(t); owns(obj, "alice", "f:replicas") || !owns(obj, "bob", "f:replicas") {
		t.Fatalf("replicas not transferred: %s", r.body)
	}

	// An update is recorded as the User-Agent's product, or the fieldManager named.
	r = do(t, "PATCH", base+"/web", `{"metadata":{"labels":{"tier":"front"}}}`, "Content-Type", "application/merge-patch+json", "User-Agent", "labeler/1.2 (linux)")
	if r.code != http.StatusOK || !owns(r.object(t), "labeler", "f:tier") {
		t.Fatalf("merge patch: %d %s", r.code, r.body)
	}
	cur := r.object(t)
	cur["spec"].(map[string]any)["paused"] = true
	if r = do(t, "PUT", base+"/web?fieldManager=pauser", cur); r.code != http.StatusOK || !owns(r.object(t), "pauser", "f:paused") {
		t.Fatalf("update: %d %s", r.code, r.body)
	}

	// The status and scale subresources are recorded as such.
	cur = r.object(t)
	cur["status"] = map[string]any{"observedGeneration": 1, "replicas": 2}
	if r = do(t, "PUT", base+"/web/status", cur, "User-Agent", "controller/1"); r.code != http.StatusOK {
		t.Fatalf("status: %d %s", r.code, r.body)
	}
	if r = do(t, "PATCH", base+"/web/scale", `{"spec":{"replicas":7}}`, "Content-Type", "application/merge-patch+json", "User-Agent", "scaler/1"); r.code != http.StatusOK {
		t.Fatalf("scale: %d %s", r.code, r.body)
	}
	obj = do(t, "GET", base+"/web", nil).object(t)
	want := []string{"alice/Apply/", "bob/Apply/", "controller/Update/status", "labeler/Update/", "pauser/Update/", "scaler/Update/scale"}
	if got := managers(t, obj); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("managers = %v, want %v", got, want)
	}
	if !owns(obj, "scaler", "f:replicas") || owns(obj, "bob", "f:replicas") || owns(obj, "controller", "f:spec") {
		t.Fatalf("ownership after status and scale writes: %s", get(obj, "metadata", "managedFields"))
	}

	// A client's empty managedFields resets them.
	r = do(t, "PATCH", base+"/web", `{"metadata":{"managedFields":[]}}`, "Content-Type", "application/merge-patch+json")
	if r.code != http.StatusOK || get(r.object(t), "metadata", "managedFields") != nil {
		t.Fatalf("reset: %d %s", r.code, r.body)
	}
}

func TestApplyBadInput(t *testing.T) {
	ns := namespace(t)
	base := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	if r := do(t, "PATCH", base+"/web?fieldManager=alice", webDeployment(1, "nginx"), "Content-Type", applyYAML); r.code != http.StatusCreated {
		t.Fatalf("setup: %d %s", r.code, r.body)
	}
	rv := get(do(t, "GET", base+"/web", nil).object(t), "metadata", "resourceVersion")
	for _, tc := range []struct {
		name, path, contentType, body string
		code                          int
		reason                        metav1.StatusReason
		message                       string
	}{
		{"not YAML", "/web?fieldManager=x", applyYAML, "{", 400, metav1.StatusReasonBadRequest, "error decoding YAML: "},
		{"no fieldManager", "/web", applyYAML, webDeployment(2, "nginx"), 422, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`},
		{"force on a merge patch", "/web?force=true", "application/merge-patch+json", "{}", 422, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`},
		{"another kind", "/web?fieldManager=x", applyYAML, "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n", 400, metav1.StatusReasonBadRequest, "invalid object type: /v1, Kind=Pod"},
		{"unknown field", "/web?fieldManager=x", applyYAML, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {foo: 1}\n", 500, "", "failed to create typed patch object"},
		{"another name", "/web?fieldManager=x", applyYAML, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: other}\n", 400, metav1.StatusReasonBadRequest, "the name of the object (other) does not match the name on the URL (web)"},
		{"managedFields in the patch", "/web?fieldManager=x", applyYAML, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, managedFields: [{manager: x}]}\n", 400, metav1.StatusReasonBadRequest, "metadata.managedFields must be nil"},
		{"bad force", "/web?fieldManager=x&force=maybe", applyYAML, webDeployment(1, "nginx"), 400, metav1.StatusReasonBadRequest, "invalid force"},
		{"create with no name", "/other?fieldManager=x", applyYAML, "apiVersion: apps/v1\nkind: Deployment\n", 400, metav1.StatusReasonBadRequest, "does not match the name on the URL (other)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "PATCH", base+tc.path, tc.body, "Content-Type", tc.contentType)
			var st metav1.Status
			if err := json.Unmarshal(r.body, &st); err != nil || r.code != tc.code || st.Reason != tc.reason || !strings.Contains(st.Message, tc.message) {
				t.Fatalf("%d %s, want %d %s %q", r.code, r.body, tc.code, tc.reason, tc.message)
			}
		})
	}
	if got := get(do(t, "GET", base+"/web", nil).object(t), "metadata", "resourceVersion"); got != rv {
		t.Errorf("bad applies changed the object: resourceVersion %v → %v", rv, got)
	}
	if r := do(t, "GET", base+"/other", nil); r.code != http.StatusNotFound {
		t.Errorf("a bad apply created an object: %d", r.code)
	}
	// A dry run creates nothing.
	if r := do(t, "PATCH", base+"/dry?fieldManager=x&dryRun=All", strings.Replace(webDeployment(1, "nginx"), "name: web\nspec", "name: dry\nspec", 1), "Content-Type", applyYAML); r.code != http.StatusCreated {
		t.Fatalf("dry-run apply: %d %s", r.code, r.body)
	}
	if r := do(t, "GET", base+"/dry", nil); r.code != http.StatusNotFound {
		t.Errorf("a dry-run apply created the object: %d", r.code)
	}
}

// TestUpdateManagersAreCapped checks Kubernetes' cap: at most ten Update entries, the oldest
// merged into one when more managers write.
func TestUpdateManagersAreCapped(t *testing.T) {
	ns := namespace(t)
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	// Created with data of its own: an object whose creator owns nothing is never tracked by
	// later updates, in Kubernetes as here.
	if r := do(t, "POST", path+"?fieldManager=creator", map[string]any{"metadata": map[string]any{"name": "cm"}, "data": map[string]any{"a": "b"}}); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	var r response
	for i := range 14 {
		r = do(t, "PATCH", fmt.Sprintf("%s/cm?fieldManager=m%d", path, i), fmt.Sprintf(`{"data":{"k%d":"v"}}`, i), "Content-Type", "application/merge-patch+json")
		if r.code != http.StatusOK {
			t.Fatalf("patch %d: %d %s", i, r.code, r.body)
		}
	}
	got := managers(t, r.object(t))
	if len(got) != 10 || !strings.Contains(strings.Join(got, " "), "ancient-changes") || !strings.Contains(strings.Join(got, " "), "m13/Update/") {
		t.Fatalf("managers = %v", got)
	}
}

// scalableCRD is a CRD whose custom resources have a scale subresource at .spec.size.
const scalableCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.{{g}}}
spec:
  group: {{g}}
  scope: Namespaced
  names: {plural: pools, singular: pool, kind: Pool, listKind: PoolList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            properties:
              size: {type: integer}
`

// Server-side apply of a Scale to the scale subresource of every scalable kind: the parent's
// replicas change, the applier owns them under subresource "scale", and conflicts, force and
// a later Update through the scale read as kube-apiserver v1.36's.
func TestApplyScale(t *testing.T) {
	ns := namespace(t)
	createCRD(t, crdOf(t, "scale.example.com", scalableCRD))
	t.Cleanup(func() { do(t, "DELETE", crdsPath+"/pools.scale.example.com", nil) })

	podTemplate := `"template":{"metadata":{"labels":{"app":"s"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}`
	cases := []struct {
		kind, path, apiVersion, body string
	}{
		{kind: "Deployment", path: "/apis/apps/v1/namespaces/" + ns + "/deployments", apiVersion: "apps/v1",
			body: `"spec":{"replicas":1,"selector":{"matchLabels":{"app":"s"}},` + podTemplate + `}`},
		{kind: "ReplicaSet", path: "/apis/apps/v1/namespaces/" + ns + "/replicasets", apiVersion: "apps/v1",
			body: `"spec":{"replicas":1,"selector":{"matchLabels":{"app":"s"}},` + podTemplate + `}`},
		{kind: "StatefulSet", path: "/apis/apps/v1/namespaces/" + ns + "/statefulsets", apiVersion: "apps/v1",
			body: `"spec":{"replicas":1,"serviceName":"s","selector":{"matchLabels":{"app":"s"}},` + podTemplate + `}`},
		{kind: "ReplicationController", path: "/api/v1/namespaces/" + ns + "/replicationcontrollers", apiVersion: "v1",
			body: `"spec":{"replicas":1,"selector":{"app":"s"},` + podTemplate + `}`},
		{kind: "Pool", path: "/apis/scale.example.com/v1/namespaces/" + ns + "/pools", apiVersion: "scale.example.com/v1",
			body: `"spec":{"size":1}`},
	}
	applyScale := func(path, body string, query ...string) response {
		q := "?fieldManager=hpa"
		for _, p := range query {
			q += "&" + p
		}
		return do(t, "PATCH", path+"/scale"+q, body, "Content-Type", applyYAML)
	}
	scale := func(replicas int) string {
		return fmt.Sprintf("apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: s}\nspec: {replicas: %d}\n", replicas)
	}
	replicasKey := func(kind string) string {
		if kind == "Pool" {
			return "f:size"
		}
		return "f:replicas"
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			obj := `{"apiVersion":"` + c.apiVersion + `","kind":"` + c.kind + `","metadata":{"name":"s"},` + c.body + `}`
			if r := do(t, "POST", c.path, obj, "User-Agent", "creator/1"); r.code != http.StatusCreated {
				t.Fatalf("create: %d %s", r.code, r.body)
			}
			path := c.path + "/s"
			r := applyScale(path, scale(3))
			if r.code != http.StatusConflict || get(r.object(t), "message") != `Apply failed with 1 conflict: conflict with "creator" using autoscaling/v1: .spec.replicas` {
				t.Fatalf("apply without force: %d %s", r.code, r.body)
			}

			r = applyScale(path, scale(3), "force=true")
			if r.code != http.StatusOK || get(r.object(t), "kind") != "Scale" || get(r.object(t), "spec", "replicas") != 3.0 || get(r.object(t), "metadata", "managedFields") != nil {
				t.Fatalf("forced apply: %d %s", r.code, r.body)
			}
			parent := do(t, "GET", path, nil).object(t)
			if got := managers(t, parent); strings.Join(got, " ") != "creator/Update/ hpa/Apply/scale" {
				t.Errorf("managers after apply: %v", got)
			}
			if !owns(parent, "hpa", replicasKey(c.kind)) || owns(parent, "creator", replicasKey(c.kind)) {
				t.Errorf("replicas not transferred to hpa: %s", get(parent, "metadata", "managedFields"))
			}

			// Applying again, or another value, needs no force now.
			if r := applyScale(path, scale(4)); r.code != http.StatusOK || get(r.object(t), "spec", "replicas") != 4.0 {
				t.Fatalf("second apply: %d %s", r.code, r.body)
			}

			// kubectl scale's merge patch takes the replicas over (an Update never conflicts).
			r = do(t, "PATCH", path+"/scale", `{"spec":{"replicas":2}}`, "Content-Type", "application/merge-patch+json", "User-Agent", "kubectl/v1.32")
			if r.code != http.StatusOK || get(r.object(t), "spec", "replicas") != 2.0 {
				t.Fatalf("merge patch: %d %s", r.code, r.body)
			}
			parent = do(t, "GET", path, nil).object(t)
			if got := managers(t, parent); strings.Join(got, " ") != "creator/Update/ kubectl/Update/scale" {
				t.Errorf("managers after the merge patch: %v", got)
			}
			if r := applyScale(path, scale(5)); r.code != http.StatusConflict ||
				get(r.object(t), "message") != `Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using autoscaling/v1: .spec.replicas` {
				t.Errorf("apply against the scaler: %d %s", r.code, r.body)
			}
		})
	}

	base := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	bad := []struct {
		name, path, body string
		code             int
		message          string
	}{
		{name: "another kind", path: base + "/s", body: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: s}\nspec: {replicas: 3}\n",
			code: http.StatusBadRequest, message: "invalid object type: apps/v1, Kind=Deployment"},
		{name: "negative replicas", path: base + "/s", body: scale(-1), code: http.StatusUnprocessableEntity,
			message: `Scale.autoscaling "s" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0`},
		{name: "no such object", path: base + "/nope", body: scale(1), code: http.StatusNotFound, message: `deployments.apps "nope" not found`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			r := applyScale(c.path, c.body, "force=true")
			if r.code != c.code || get(r.object(t), "message") != c.message {
				t.Errorf("got %d %s, want %d %q", r.code, r.body, c.code, c.message)
			}
		})
	}
}

// kubectl v1.32 against a Deployment whose replicas were applied through its scale
// subresource: `kubectl scale` takes them over, and `kubectl apply --server-side
// --subresource=scale` (which sends the Deployment itself) is refused as kube-apiserver v1.36
// refuses it.
func TestKubectlScaleAfterScaleApply(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	ns := namespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, server.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", t.TempDir(), "-n", ns}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	base := "/apis/apps/v1/namespaces/" + ns + "/deployments"
	if r := do(t, "PATCH", base+"/web?fieldManager=alice", webDeployment(1, "nginx:1"), "Content-Type", applyYAML); r.code != http.StatusCreated {
		t.Fatalf("apply: %d %s", r.code, r.body)
	}
	if r := do(t, "PATCH", base+"/web/scale?fieldManager=hpa&force=true", "apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: web}\nspec: {replicas: 3}\n", "Content-Type", applyYAML); r.code != http.StatusOK {
		t.Fatalf("apply to scale: %d %s", r.code, r.body)
	}

	if out, err := run("", "scale", "deployment", "web", "--replicas=4"); err != nil || out != "deployment.apps/web scaled" {
		t.Fatalf("kubectl scale: %v: %s", err, out)
	}
	obj := do(t, "GET", base+"/web", nil).object(t)
	if get(obj, "spec", "replicas") != 4.0 || !owns(obj, "kubectl", "f:replicas") || owns(obj, "hpa", "f:replicas") {
		t.Fatalf("after kubectl scale: replicas %v, managedFields %s", get(obj, "spec", "replicas"), get(obj, "metadata", "managedFields"))
	}

	out, err := run("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 6}\n",
		"apply", "--server-side", "--subresource=scale", "--field-manager=hpa", "--force-conflicts", "-f", "-")
	if err == nil || out != "Error from server (BadRequest): invalid object type: apps/v1, Kind=Deployment" {
		t.Fatalf("kubectl apply --subresource=scale: %v: %s", err, out)
	}
}
