package fieldmanager

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// A custom resource whose ports are a map keyed by port and protocol, whose labels-like map is
// atomic, and which embeds a whole resource and some free-form data.
const widgetSchema = `
type: object
properties:
  spec:
    type: object
    properties:
      size: {type: integer}
      ports:
        type: array
        x-kubernetes-list-type: map
        x-kubernetes-list-map-keys: [port, protocol]
        items:
          type: object
          required: [port, protocol]
          properties:
            port: {type: integer}
            protocol: {type: string}
            name: {type: string}
      tags:
        type: array
        x-kubernetes-list-type: set
        items: {type: string}
      selector:
        type: object
        x-kubernetes-map-type: atomic
        additionalProperties: {type: string}
      template:
        type: object
        x-kubernetes-embedded-resource: true
        x-kubernetes-preserve-unknown-fields: true
      extra:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

func TestForJSONSchema(t *testing.T) {
	var s map[string]any
	if err := yaml.Unmarshal([]byte(widgetSchema), &s); err != nil {
		t.Fatal(err)
	}
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	types, err := ForJSONSchema(gvk, s)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(types, Options{Kind: gvk, New: func() runtime.Object { return &unstructured.Unstructured{} }, Reset: []string{"status"}})
	if err != nil {
		t.Fatal(err)
	}
	head := "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, labels: {a: b}}\n"
	live, err := m.Apply(nil, []byte(head+`spec:
  size: 1
  ports: [{port: 80, protocol: TCP, name: http}]
  tags: [blue]
  selector: {app: w}
  template: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {anything: [1]}}
  extra: {x: {z: 1}}
`), "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, body, wantErr string }{
		// Another entry of the map and another member of the set are bob's alone.
		{name: "other keys", body: "spec: {ports: [{port: 80, protocol: UDP}], tags: [red]}"},
		{name: "a field alice set", body: "spec: {size: 2}", wantErr: `conflict with "alice": .spec.size`},
		{name: "inside an entry of alice's", body: "spec: {ports: [{port: 80, protocol: TCP, name: web}]}", wantErr: `.spec.ports[port=80,protocol="TCP"].name`},
		{name: "an atomic map", body: "spec: {selector: {other: x}}", wantErr: ".spec.selector"},
		{name: "embedded metadata", body: "spec: {template: {metadata: {name: q}}}", wantErr: ".spec.template.metadata.name"},
		{name: "free-form fields", body: "spec: {extra: {x: {z: 2}}}", wantErr: ".spec.extra.x.z"},
		{name: "a list where a scalar belongs", body: "spec: {size: [1]}", wantErr: "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Apply(live.DeepCopyObject(), []byte(head+tc.body), "bob", false)
			switch {
			case tc.wantErr == "500":
				if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != 500 {
					t.Fatalf("err = %v, want 500", err)
				}
			case tc.wantErr == "":
				if err != nil {
					t.Fatal(err)
				}
			case !apierrors.IsConflict(err) || !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("err = %v, want a conflict on %s", err, tc.wantErr)
			}
		})
	}
}
