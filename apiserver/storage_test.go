package apiserver_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Cluster-scoped storage objects are shared by the package's tests, so each test names its own.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1000000)
}

func storageClassBody(name, provisioner string, isDefault bool) map[string]any {
	m := map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": map[string]any{"name": name}, "provisioner": provisioner}
	if isDefault {
		m["metadata"].(map[string]any)["annotations"] = map[string]any{"storageclass.kubernetes.io/is-default-class": "true"}
	}
	return m
}

func claimBody(name string, spec map[string]any) map[string]any {
	s := map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}
	for k, v := range spec {
		s[k] = v
	}
	return map[string]any{"metadata": map[string]any{"name": name}, "spec": s}
}

// causes returns "field: reason" for each cause of a Status.
func causes(t *testing.T, r response) []string {
	t.Helper()
	var out []string
	list, _ := get(r.object(t), "details", "causes").([]any)
	for _, c := range list {
		out = append(out, fmt.Sprint(get(c, "field"))+": "+fmt.Sprint(get(c, "reason")))
	}
	slices.Sort(out)
	return out
}

// TestStorageDefaultsAndAdmission checks what the server fills in on create: the default
// StorageClass (the newest of two defaults), protection finalizers, and the defaults of all three.
func TestStorageDefaultsAndAdmission(t *testing.T) {
	ns := namespace(t)
	older, newer := uniqueName("older"), uniqueName("newer")
	for _, name := range []string{older, newer} {
		if r := do(t, "POST", "/apis/storage.k8s.io/v1/storageclasses", storageClassBody(name, "example.com/disk", true)); r.code != http.StatusCreated {
			t.Fatalf("create class: %d %s", r.code, r.body)
		}
		t.Cleanup(func() { do(t, "DELETE", "/apis/storage.k8s.io/v1/storageclasses/"+name, nil) })
		time.Sleep(2 * time.Millisecond) // creation times must differ for "newest" to mean something
	}
	sc := do(t, "GET", "/apis/storage.k8s.io/v1/storageclasses/"+newer, nil).object(t)
	if get(sc, "reclaimPolicy") != "Delete" || get(sc, "volumeBindingMode") != "Immediate" {
		t.Errorf("class defaults: %v %v", get(sc, "reclaimPolicy"), get(sc, "volumeBindingMode"))
	}

	r := do(t, "POST", "/api/v1/namespaces/"+ns+"/persistentvolumeclaims", claimBody("data", nil))
	if r.code != http.StatusCreated {
		t.Fatalf("create claim: %d %s", r.code, r.body)
	}
	c := r.object(t)
	for _, check := range []struct {
		path []any
		want any
	}{
		{[]any{"spec", "storageClassName"}, newer},
		{[]any{"spec", "volumeMode"}, "Filesystem"},
		{[]any{"status", "phase"}, "Pending"},
		{[]any{"metadata", "finalizers", 0}, "kubernetes.io/pvc-protection"},
	} {
		if got := get(c, check.path...); got != check.want {
			t.Errorf("claim %v = %v, want %v", check.path, got, check.want)
		}
	}
	// An explicit empty class means "no class" and is kept.
	r = do(t, "POST", "/api/v1/namespaces/"+ns+"/persistentvolumeclaims", claimBody("none", map[string]any{"storageClassName": ""}))
	if got := get(r.object(t), "spec", "storageClassName"); r.code != http.StatusCreated || got != "" {
		t.Errorf("empty class: %d, class %v", r.code, got)
	}

	pvName := uniqueName("pv")
	r = do(t, "POST", "/api/v1/persistentvolumes", map[string]any{"metadata": map[string]any{"name": pvName},
		"spec": map[string]any{"capacity": map[string]any{"storage": "1Gi"}, "accessModes": []any{"ReadWriteOnce"},
			"hostPath": map[string]any{"path": "/tmp/" + pvName}}})
	if r.code != http.StatusCreated {
		t.Fatalf("create volume: %d %s", r.code, r.body)
	}
	t.Cleanup(func() { do(t, "DELETE", "/api/v1/persistentvolumes/"+pvName, nil) })
	v := r.object(t)
	for _, check := range []struct {
		path []any
		want any
	}{
		{[]any{"spec", "persistentVolumeReclaimPolicy"}, "Retain"},
		{[]any{"spec", "volumeMode"}, "Filesystem"},
		{[]any{"spec", "hostPath", "type"}, ""},
		{[]any{"status", "phase"}, "Pending"},
		{[]any{"metadata", "finalizers", 0}, "kubernetes.io/pv-protection"},
	} {
		if got := get(v, check.path...); got != check.want {
			t.Errorf("volume %v = %v, want %v", check.path, got, check.want)
		}
	}
	if get(v, "status", "lastPhaseTransitionTime") == nil {
		t.Errorf("volume has no lastPhaseTransitionTime: %s", r.body)
	}
}

// TestStorageBadInput checks that invalid objects and forbidden changes get Kubernetes' status
// with field causes, and change nothing.
func TestStorageBadInput(t *testing.T) {
	ns := namespace(t)
	claims := "/api/v1/namespaces/" + ns + "/persistentvolumeclaims"
	scName := uniqueName("fixed")
	if r := do(t, "POST", "/apis/storage.k8s.io/v1/storageclasses", storageClassBody(scName, "example.com/disk", false)); r.code != http.StatusCreated {
		t.Fatalf("create class: %d %s", r.code, r.body)
	}
	t.Cleanup(func() { do(t, "DELETE", "/apis/storage.k8s.io/v1/storageclasses/"+scName, nil) })
	if r := do(t, "POST", claims, claimBody("data", map[string]any{"storageClassName": scName})); r.code != http.StatusCreated {
		t.Fatalf("create claim: %d %s", r.code, r.body)
	}

	for _, tc := range []struct {
		name, method, path string
		body               any
		code               int
		causes             []string
		message            string
	}{
		{"volume without anything", "POST", "/api/v1/persistentvolumes", map[string]any{"metadata": map[string]any{"name": uniqueName("empty")}},
			422, []string{"spec.accessModes: FieldValueRequired", "spec.capacity: FieldValueNotSupported", "spec.capacity: FieldValueRequired", "spec: FieldValueRequired"}, ""},
		{"volume with two sources", "POST", "/api/v1/persistentvolumes", map[string]any{"metadata": map[string]any{"name": uniqueName("two")},
			"spec": map[string]any{"capacity": map[string]any{"storage": "1Gi"}, "accessModes": []any{"ReadWriteOnce"},
				"hostPath": map[string]any{"path": "/a"}, "local": map[string]any{"path": "/b"}}},
			422, []string{"spec.local: FieldValueForbidden", "spec.nodeAffinity: FieldValueRequired"}, ""},
		{"claim without request", "POST", claims, map[string]any{"metadata": map[string]any{"name": "bad"}, "spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}}},
			422, []string{"spec.resources[storage]: FieldValueRequired"}, ""},
		{"claim with a bad access mode", "POST", claims, claimBody("bad", map[string]any{"accessModes": []any{"ReadWriteSometimes"}}),
			422, []string{"spec.accessModes: FieldValueNotSupported"}, ""},
		{"class without provisioner", "POST", "/apis/storage.k8s.io/v1/storageclasses", map[string]any{"metadata": map[string]any{"name": uniqueName("noprov")}},
			422, []string{"provisioner: FieldValueRequired"}, ""},
		{"class with Recycle", "POST", "/apis/storage.k8s.io/v1/storageclasses", map[string]any{"metadata": map[string]any{"name": uniqueName("recycle")},
			"provisioner": "example.com/disk", "reclaimPolicy": "Recycle"},
			422, []string{"reclaimPolicy: FieldValueNotSupported"}, ""},
		{"claim access modes are immutable", "PATCH", claims + "/data", `{"spec":{"accessModes":["ReadWriteMany"]}}`,
			422, []string{"spec: FieldValueForbidden"}, "spec is immutable after creation"},
		{"class provisioner is immutable", "PATCH", "/apis/storage.k8s.io/v1/storageclasses/" + scName, `{"provisioner":"example.com/other"}`,
			422, []string{"provisioner: FieldValueInvalid"}, "field is immutable"},
		// The claim's validation refuses it before PersistentVolumeClaimResize, a validating
		// admission plugin, would (its refusal of a bound claim whose class does not expand is
		// tested in package registry).
		{"unbound claim may not grow", "PATCH", claims + "/data", `{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`,
			422, []string{"spec: FieldValueForbidden"}, "spec is immutable after creation except resources.requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var headers []string
			if tc.method == "PATCH" {
				headers = []string{"Content-Type", "application/merge-patch+json"}
			}
			r := do(t, tc.method, tc.path, tc.body, headers...)
			if r.code != tc.code {
				t.Fatalf("code %d, want %d: %s", r.code, tc.code, r.body)
			}
			if got := causes(t, r); tc.causes != nil && !slices.Equal(got, tc.causes) {
				t.Errorf("causes %q, want %q", got, tc.causes)
			}
			if !strings.Contains(string(r.body), tc.message) {
				t.Errorf("message lacks %q: %s", tc.message, r.body)
			}
		})
	}
	c := do(t, "GET", claims+"/data", nil).object(t)
	if get(c, "spec", "accessModes", 0) != "ReadWriteOnce" || get(c, "spec", "resources", "requests", "storage") != "1Gi" {
		t.Errorf("a refused update changed the claim: %v", c)
	}
}

// TestStorageDiscovery checks the resources are listed with their short names and subresources.
func TestStorageDiscovery(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/api/v1", `"name":"persistentvolumes","singularName":"persistentvolume","namespaced":false,"kind":"PersistentVolume"`},
		{"/api/v1", `"name":"persistentvolumeclaims/status"`},
		{"/api/v1", `"shortNames":["pvc"]`},
		{"/apis", `"name":"storage.k8s.io"`},
		{"/apis/storage.k8s.io/v1", `"name":"storageclasses","singularName":"storageclass","namespaced":false,"kind":"StorageClass"`},
		{"/apis/storage.k8s.io/v1", `"shortNames":["sc"]`},
		{"/openapi/v3", `"apis/storage.k8s.io/v1"`},
	} {
		if r := do(t, "GET", tc.path, nil); r.code != 200 || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("GET %s: %d, lacks %s", tc.path, r.code, tc.want)
		}
	}
}
