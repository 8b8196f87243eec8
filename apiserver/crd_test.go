package apiserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const crdsPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// crdOf builds a CRD of group g from YAML, with {{g}} replaced by g.
func crdOf(t *testing.T, g, src string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(src, "{{g}}", g)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// eventually polls cond every 20ms for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// conditionOf returns the status of a CRD condition.
func conditionOf(crd map[string]any, typ string) (status, reason string) {
	conds, _ := get(crd, "status", "conditions").([]any)
	for _, c := range conds {
		if get(c, "type") == typ {
			return fmt.Sprint(get(c, "status")), fmt.Sprint(get(c, "reason"))
		}
	}
	return "", ""
}

// createCRD creates a CRD and waits until it is Established.
func createCRD(t *testing.T, crd map[string]any) {
	t.Helper()
	if r := do(t, "POST", crdsPath, crd); r.code != http.StatusCreated {
		t.Fatalf("create CRD: %d %s", r.code, r.body)
	}
	name := get(crd, "metadata", "name").(string)
	eventually(t, name+" Established", func() bool {
		st, _ := conditionOf(do(t, "GET", crdsPath+"/"+name, nil).object(t), "Established")
		return st == "True"
	})
}

const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.{{g}}}
spec:
  group: {{g}}
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    selectableFields: [{jsonPath: .spec.color}]
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [color]
            properties:
              color: {type: string, enum: [red, blue]}
              replicas: {type: integer, minimum: 0, default: 1}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

func widget(name, color string, extra ...map[string]any) map[string]any {
	spec := map[string]any{"color": color}
	for _, e := range extra {
		for k, v := range e {
			spec[k] = v
		}
	}
	return map[string]any{"apiVersion": "", "kind": "Widget", "metadata": map[string]any{"name": name}, "spec": spec}
}

func TestCustomResources(t *testing.T) {
	g := fmt.Sprintf("crd%d.example.com", time.Now().UnixNano()%100000)
	ns := namespace(t)
	createCRD(t, crdOf(t, g, widgetCRD))
	base := "/apis/" + g + "/v1/namespaces/" + ns + "/widgets"
	w := func(name, color string, extra ...map[string]any) map[string]any {
		o := widget(name, color, extra...)
		o["apiVersion"] = g + "/v1"
		return o
	}

	t.Run("discovery", func(t *testing.T) {
		r := do(t, "GET", "/apis/"+g+"/v1", nil)
		for _, want := range []string{`"name":"widgets"`, `"shortNames":["wd"]`, `"categories":["all"]`, `"name":"widgets/status"`, `"name":"widgets/scale"`} {
			if !strings.Contains(string(r.body), want) {
				t.Errorf("discovery lacks %s: %s", want, r.body)
			}
		}
		if !strings.Contains(string(do(t, "GET", "/apis", nil).body), `"preferredVersion":{"groupVersion":"`+g+`/v2"`) {
			t.Errorf("v2 is not the group's preferred version")
		}
	})

	t.Run("create defaults, prunes and validates", func(t *testing.T) {
		r := do(t, "POST", base+"?fieldValidation=Warn", w("a", "red", map[string]any{"bogus": 1}))
		if r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		obj := r.object(t)
		if get(obj, "spec", "replicas") != float64(1) || get(obj, "spec", "bogus") != nil || get(obj, "metadata", "generation") != float64(1) {
			t.Errorf("created object not defaulted and pruned: %s", r.body)
		}
		if warn := r.header.Get("Warning"); !strings.Contains(warn, `unknown field \"spec.bogus\"`) {
			t.Errorf("warning %q, want the unknown field", warn)
		}
		r = do(t, "POST", base+"?fieldValidation=Strict", w("b", "red", map[string]any{"bogus": 1}))
		if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), `Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.bogus\"`) {
			t.Errorf("strict unknown field: %d %s", r.code, r.body)
		}
		r = do(t, "POST", base, w("c", "green", map[string]any{"replicas": -1}))
		body := string(r.body)
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(body, `spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"`) ||
			!strings.Contains(body, `spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0`) || !strings.Contains(body, `"field":"spec.color"`) {
			t.Errorf("invalid widget: %d %s", r.code, body)
		}
		if r := do(t, "GET", base+"/c", nil); r.code != http.StatusNotFound {
			t.Errorf("invalid widget stored: %d", r.code)
		}
		r = do(t, "POST", base, []byte{0x6b, 0x38, 0x73, 0}, "Content-Type", "application/vnd.kubernetes.protobuf")
		if r.code != http.StatusUnsupportedMediaType {
			t.Errorf("protobuf body: %d %s", r.code, r.body)
		}
	})

	t.Run("status, generation and scale", func(t *testing.T) {
		do(t, "POST", base, w("s", "blue"))
		obj := do(t, "GET", base+"/s", nil).object(t)
		obj["status"] = map[string]any{"replicas": 2, "selector": "app=s"}
		obj["spec"].(map[string]any)["replicas"] = 2
		r := do(t, "PUT", base+"/s", obj)
		if get(r.object(t), "status") != nil || get(r.object(t), "metadata", "generation") != float64(2) {
			t.Errorf("update of the object: status must be kept, generation bumped: %s", r.body)
		}
		r = do(t, "PATCH", base+"/s/status", `{"status":{"replicas":2,"selector":"app=s"},"spec":{"color":"red"}}`, "Content-Type", "application/merge-patch+json")
		if get(r.object(t), "status", "replicas") != float64(2) || get(r.object(t), "spec", "color") != "blue" || get(r.object(t), "metadata", "generation") != float64(2) {
			t.Errorf("status write: %d %s", r.code, r.body)
		}
		r = do(t, "GET", base+"/s/scale", nil)
		if get(r.object(t), "spec", "replicas") != float64(2) || get(r.object(t), "status", "selector") != "app=s" {
			t.Errorf("scale: %s", r.body)
		}
		r = do(t, "PATCH", base+"/s/scale", `{"spec":{"replicas":5}}`, "Content-Type", "application/merge-patch+json")
		if r.code != http.StatusOK || get(do(t, "GET", base+"/s", nil).object(t), "spec", "replicas") != float64(5) {
			t.Errorf("scale patch: %d %s", r.code, r.body)
		}
		r = do(t, "PATCH", base+"/s", `{"spec":{"color":"red"}}`, "Content-Type", "application/strategic-merge-patch+json")
		if r.code != http.StatusUnsupportedMediaType {
			t.Errorf("strategic merge patch: %d %s", r.code, r.body)
		}
	})

	t.Run("list, watch, field selector, table, other version", func(t *testing.T) {
		rv := get(do(t, "GET", base, nil).object(t), "metadata", "resourceVersion").(string)
		events := startWatch(t, base+"?watch=1&fieldSelector=spec.color%3Dred&resourceVersion="+rv)
		do(t, "POST", base, w("l1", "red"))
		if ev := events.next(t); ev.Type != "ADDED" || get(ev.Object, "metadata", "name") != "l1" {
			t.Errorf("watch: %v %v", ev.Type, ev.Object)
		}
		do(t, "POST", base, w("l2", "blue"))
		r := do(t, "GET", base+"?fieldSelector=spec.color%3Dred", nil)
		items, _ := get(r.object(t), "items").([]any)
		var names []string
		for _, it := range items {
			names = append(names, get(it, "metadata", "name").(string))
		}
		if strings.Contains(strings.Join(names, ","), "l2") || !strings.Contains(strings.Join(names, ","), "l1") || get(r.object(t), "kind") != "WidgetList" {
			t.Errorf("field selector spec.color=red: %v (%s)", names, get(r.object(t), "kind"))
		}
		r = do(t, "GET", base+"/l1", nil, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		body := string(r.body)
		if !strings.Contains(body, `"name":"Color"`) || !strings.Contains(body, `"cells":["l1","red",1]`) {
			t.Errorf("table: %s", body)
		}
		r = do(t, "GET", "/apis/"+g+"/v2/namespaces/"+ns+"/widgets/l1", nil)
		if get(r.object(t), "apiVersion") != g+"/v2" || get(r.object(t), "spec", "color") != "red" {
			t.Errorf("read as v2: %s", r.body)
		}
		v2 := widget("v2obj", "blue")
		v2["apiVersion"] = g + "/v2"
		if r := do(t, "POST", "/apis/"+g+"/v2/namespaces/"+ns+"/widgets", v2); r.code != http.StatusCreated {
			t.Fatalf("create as v2: %d %s", r.code, r.body)
		}
		if r := do(t, "GET", base+"/v2obj", nil); get(r.object(t), "apiVersion") != g+"/v1" {
			t.Errorf("read as v1: %s", r.body)
		}
		r = do(t, "GET", base, nil, "Accept", "application/vnd.kubernetes.protobuf, application/json")
		if !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Errorf("custom resources must fall back to JSON, got %s", r.header.Get("Content-Type"))
		}
	})

	t.Run("delete with the group's DeleteOptions", func(t *testing.T) {
		// client-go (controller-runtime's Delete) sends DeleteOptions in the resource's group.
		do(t, "POST", base, w("d", "red"))
		opts := fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"DeleteOptions","propagationPolicy":"Background"}`, g)
		if r := do(t, "DELETE", base+"/d", opts); r.code != http.StatusOK {
			t.Errorf("delete: %d %s", r.code, r.body)
		}
		if r := do(t, "DELETE", base+"/d", `{"kind":"DeleteOptions","propagationPolicy":7}`); r.code != http.StatusBadRequest {
			t.Errorf("delete with a bad body: %d %s, want 400", r.code, r.body)
		}
	})

	t.Run("server-side apply", func(t *testing.T) {
		body := fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata: {name: applied}\nspec: {color: red, replicas: 2}\n", g)
		r := do(t, "PATCH", base+"/applied?fieldManager=alice", body, "Content-Type", "application/apply-patch+yaml")
		if r.code != http.StatusCreated || !strings.Contains(string(r.body), `"manager":"alice","operation":"Apply"`) {
			t.Fatalf("apply create: %d %s", r.code, r.body)
		}
		body = fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata: {name: applied}\nspec: {color: blue}\n", g)
		r = do(t, "PATCH", base+"/applied?fieldManager=bob", body, "Content-Type", "application/apply-patch+yaml")
		if r.code != http.StatusConflict || !strings.Contains(string(r.body), `Apply failed with 1 conflict: conflict with \"alice\": .spec.color`) {
			t.Errorf("conflicting apply: %d %s", r.code, r.body)
		}
		r = do(t, "PATCH", base+"/applied?fieldManager=bob&force=true", body, "Content-Type", "application/apply-patch+yaml")
		if r.code != http.StatusOK || get(r.object(t), "spec", "color") != "blue" || get(r.object(t), "spec", "replicas") != float64(2) {
			t.Errorf("forced apply: %d %s", r.code, r.body)
		}
	})

	t.Run("names conflict", func(t *testing.T) {
		other := crdOf(t, g, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.{{g}}}
spec:
  group: {{g}}
  scope: Cluster
  names: {plural: gadgets, singular: gadget, kind: Widget}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`)
		if r := do(t, "POST", crdsPath, other); r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		eventually(t, "NamesAccepted=False", func() bool {
			st, reason := conditionOf(do(t, "GET", crdsPath+"/gadgets."+g, nil).object(t), "NamesAccepted")
			return st == "False" && reason == "KindConflict"
		})
		if r := do(t, "GET", "/apis/"+g+"/v1/gadgets", nil); r.code != http.StatusNotFound {
			t.Errorf("a CRD whose names conflict is served: %d", r.code)
		}
		do(t, "DELETE", crdsPath+"/gadgets."+g, nil)
	})

	t.Run("deleting the CRD deletes its objects", func(t *testing.T) {
		fin := w("held", "red")
		fin["metadata"].(map[string]any)["finalizers"] = []string{"example.com/hold"}
		do(t, "POST", base, fin)
		if r := do(t, "DELETE", crdsPath+"/widgets."+g, nil); r.code != http.StatusOK {
			t.Fatalf("delete: %d %s", r.code, r.body)
		}
		eventually(t, "Terminating", func() bool {
			st, _ := conditionOf(do(t, "GET", crdsPath+"/widgets."+g, nil).object(t), "Terminating")
			return st == "True"
		})
		eventually(t, "objects deleted", func() bool {
			items, _ := get(do(t, "GET", base, nil).object(t), "items").([]any)
			return len(items) == 1
		})
		if r := do(t, "POST", base, w("late", "red")); r.code != http.StatusMethodNotAllowed || !strings.Contains(string(r.body), "create not allowed while custom resource definition is terminating") {
			t.Errorf("create while terminating: %d %s", r.code, r.body)
		}
		do(t, "PATCH", base+"/held", `{"metadata":{"finalizers":null}}`, "Content-Type", "application/merge-patch+json")
		eventually(t, "CRD gone", func() bool { return do(t, "GET", crdsPath+"/widgets."+g, nil).code == http.StatusNotFound })
		if r := do(t, "GET", base, nil); r.code != http.StatusNotFound {
			t.Errorf("resource still served after its CRD: %d %s", r.code, r.body)
		}
	})
}

func TestInvalidCRDs(t *testing.T) {
	for _, tc := range []struct {
		name, crd string
		causes    []string
	}{
		{"name does not match", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: other.example.com
  scope: Namespaced
  names: {plural: things, kind: Thing}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`, []string{`must be spec.names.plural+\".\"+spec.group`}},
		{"not structural", `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: things, kind: Thing}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {properties: {a: {type: string}}}}}}}]
`, []string{`"field":"spec.validation.openAPIV3Schema.properties[spec].type"`, `must not be empty for specified object fields`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", crdsPath, crdOf(t, "", tc.crd))
			if r.code != http.StatusUnprocessableEntity {
				t.Fatalf("got %d %s, want 422", r.code, r.body)
			}
			for _, c := range tc.causes {
				if !strings.Contains(string(r.body), c) {
					t.Errorf("answer lacks %s: %s", c, r.body)
				}
			}
			if r := do(t, "GET", crdsPath+"/things.example.com", nil); r.code != http.StatusNotFound {
				t.Errorf("invalid CRD stored: %d", r.code)
			}
		})
	}
}
