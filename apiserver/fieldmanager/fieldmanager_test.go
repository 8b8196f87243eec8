package fieldmanager

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var deploymentKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

func deploymentManager(t *testing.T, subresource string, reset ...string) *Manager {
	t.Helper()
	types, err := ForGoTypes(map[schema.GroupVersionKind]reflect.Type{deploymentKind: reflect.TypeOf(appsv1.Deployment{})})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(types, Options{Kind: deploymentKind, New: func() runtime.Object { return &appsv1.Deployment{} }, Subresource: subresource, Reset: reset})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const applyWeb = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
`

// owners lists "manager/operation/subresource" of each managedFields entry, sorted.
func owners(obj runtime.Object) []string {
	var out []string
	for _, e := range obj.(*appsv1.Deployment).ManagedFields {
		out = append(out, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
	}
	sort.Strings(out)
	return out
}

func apply(t *testing.T, m *Manager, live runtime.Object, body, manager string, force bool) *appsv1.Deployment {
	t.Helper()
	out, err := m.Apply(live, []byte(body), manager, force)
	if err != nil {
		t.Fatalf("apply by %s: %v", manager, err)
	}
	return out.(*appsv1.Deployment)
}

func TestApplyCreatesAndOwns(t *testing.T) {
	m := deploymentManager(t, "", "status")
	d := apply(t, m, nil, applyWeb, "alice", false)
	if d.Name != "web" || *d.Spec.Replicas != 3 || d.Spec.Template.Spec.Containers[0].Image != "nginx" {
		t.Fatalf("applied object: %+v", d.Spec)
	}
	if got := owners(d); !reflect.DeepEqual(got, []string{"alice/Apply/"}) {
		t.Fatalf("owners = %v", got)
	}
	fields := string(d.ManagedFields[0].FieldsV1.Raw)
	for _, want := range []string{`"f:replicas"`, `"k:{\"name\":\"web\"}"`, `"f:image"`} {
		if !strings.Contains(fields, want) {
			t.Errorf("fieldsV1 %s lacks %s", fields, want)
		}
	}
}

func TestApplyConflicts(t *testing.T) {
	m := deploymentManager(t, "", "status")
	live := apply(t, m, nil, applyWeb, "alice", false)
	scaled := strings.Replace(applyWeb, "replicas: 3", "replicas: 5", 1)
	same := applyWeb
	for _, tc := range []struct {
		name, body string
		force      bool
		wantErr    string
		wantOwners []string
	}{
		{name: "other value conflicts", body: scaled, wantErr: `Apply failed with 1 conflict: conflict with "alice": .spec.replicas`},
		{name: "force takes the field", body: scaled, force: true, wantOwners: []string{"alice/Apply/", "bob/Apply/"}},
		{name: "the same value is shared", body: same, wantOwners: []string{"alice/Apply/", "bob/Apply/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := m.Apply(live.DeepCopy(), []byte(tc.body), "bob", tc.force)
			if tc.wantErr != "" {
				if !apierrors.IsConflict(err) || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want 409 %q", err, tc.wantErr)
				}
				causes := err.(apierrors.APIStatus).Status().Details.Causes
				if len(causes) != 1 || causes[0].Field != ".spec.replicas" || causes[0].Type != metav1.CauseTypeFieldManagerConflict {
					t.Fatalf("causes = %+v", causes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := owners(out); !reflect.DeepEqual(got, tc.wantOwners) {
				t.Fatalf("owners = %v, want %v", got, tc.wantOwners)
			}
		})
	}
}

func TestForceTransfersOwnership(t *testing.T) {
	m := deploymentManager(t, "", "status")
	live := apply(t, m, nil, applyWeb, "alice", false)
	live = apply(t, m, live, strings.Replace(applyWeb, "replicas: 3", "replicas: 5", 1), "bob", true)
	// alice no longer owns replicas: applying without it leaves bob's value.
	live = apply(t, m, live, strings.Replace(applyWeb, "  replicas: 3\n", "", 1), "alice", false)
	if *live.Spec.Replicas != 5 {
		t.Fatalf("replicas = %d, want bob's 5", *live.Spec.Replicas)
	}
	// bob gives it up: nobody owns it and it goes.
	live = apply(t, m, live, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n", "bob", false)
	if live.Spec.Replicas != nil {
		t.Fatalf("replicas = %d, want removed with its last owner", *live.Spec.Replicas)
	}
}

func TestUpdateRecordsManager(t *testing.T) {
	m := deploymentManager(t, "", "status")
	status := deploymentManager(t, "status", "spec")
	live := apply(t, m, nil, applyWeb, "alice", false)
	next := live.DeepCopy()
	next.Spec.Paused = true
	next.Status.Replicas = 9 // the object's endpoint does not write status
	updated := m.Update(live, next, "kubectl-edit").(*appsv1.Deployment)
	if got := owners(updated); !reflect.DeepEqual(got, []string{"alice/Apply/", "kubectl-edit/Update/"}) {
		t.Fatalf("owners = %v", got)
	}
	if f := string(updated.ManagedFields[1].FieldsV1.Raw); strings.Contains(f, "status") || !strings.Contains(f, "f:paused") {
		t.Fatalf("kubectl-edit owns %s", f)
	}
	next = updated.DeepCopy()
	next.Status.Replicas = 3
	updated = status.Update(updated, next, "controller").(*appsv1.Deployment)
	if got := owners(updated); !reflect.DeepEqual(got, []string{"alice/Apply/", "controller/Update/status", "kubectl-edit/Update/"}) {
		t.Fatalf("owners = %v", got)
	}
	// An empty list from the client resets them.
	next = updated.DeepCopy()
	next.ManagedFields = []metav1.ManagedFieldsEntry{}
	if reset := m.Update(updated, next, "x").(*appsv1.Deployment); len(reset.ManagedFields) != 0 {
		t.Fatalf("reset left %v", owners(reset))
	}
}

func TestApplyBadInput(t *testing.T) {
	m := deploymentManager(t, "")
	for _, tc := range []struct {
		name, body string
		code       int32
		want       string
	}{
		{"not YAML", "{", 400, "error decoding YAML"},
		{"a list", "- a\n- b\n", 400, "error decoding YAML"},
		{"another kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n", 400, "invalid object type: /v1, Kind=Pod"},
		{"another version", "apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: web}\n", 400, "invalid object type"},
		{"managedFields set", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, managedFields: [{manager: x}]}\n", 400, "metadata.managedFields must be nil"},
		{"wrong shape", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: [1]}\n", 500,
			"failed to create typed patch object (/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got []interface {}"},
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {foo: 1}\n", 500, ".spec.foo: field not declared in schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Apply(nil, []byte(tc.body), "alice", false)
			st, ok := err.(apierrors.APIStatus)
			if !ok || st.Status().Code != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %d containing %q", err, tc.code, tc.want)
			}
		})
	}
}

func TestManagerName(t *testing.T) {
	for _, tc := range []struct{ fieldManager, userAgent, want string }{
		{"mine", "kubectl/v1.32.0 (linux/amd64)", "mine"},
		{"", "kubectl/v1.32.0 (linux/amd64) kubernetes/abc", "kubectl"},
		{"", "kube-controller-manager/v1.36.0", "kube-controller-manager"},
		{"", "odd\x01name", "oddname"},
		{"", strings.Repeat("a", 200), strings.Repeat("a", 128)},
	} {
		if got := ManagerName(tc.fieldManager, tc.userAgent); got != tc.want {
			t.Errorf("ManagerName(%q, %q) = %q, want %q", tc.fieldManager, tc.userAgent, got, tc.want)
		}
	}
}

// TestApplyKeepsDefaultedKeys applies ports without their protocol twice: the live ports,
// defaulted to TCP, are the same entries, not others.
func TestApplyKeepsDefaultedKeys(t *testing.T) {
	m := deploymentManager(t, "", "status")
	withPort := strings.Replace(applyWeb, "image: nginx\n", "image: nginx\n        ports: [{containerPort: 80}]\n", 1)
	live := apply(t, m, nil, withPort, "alice", false)
	live.Spec.Template.Spec.Containers[0].Ports[0].Protocol = "TCP" // as the strategy defaults it
	live = apply(t, m, live, withPort, "alice", false)
	if ports := live.Spec.Template.Spec.Containers[0].Ports; len(ports) != 1 {
		t.Fatalf("ports = %+v, want the one TCP port", ports)
	}
}
