package registry

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// TestAPIServices: a local APIService is available at once; one naming a service is not, and
// says why; names follow the spec.
func TestAPIServices(t *testing.T) {
	local := LocalAPIService(rbacV1)
	apiServices.PrepareCreate(local)
	if e := errs(apiServices.ValidateObject(local, nil)); len(e) > 0 {
		t.Errorf("local APIService invalid: %q", e)
	}
	if got, want := apiServices.TableRow(local), []any{"v1.rbac.authorization.k8s.io", "Local", "True", "<unknown>"}; !slices.Equal(got, want) {
		t.Errorf("row %q, want %q", got, want)
	}
	if s := local.Spec; s.GroupPriorityMinimum != 17000 || s.VersionPriority != 15 {
		t.Errorf("priorities %d/%d", s.GroupPriorityMinimum, s.VersionPriority)
	}
	remote := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "example.com", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
			Service: &apiregistrationv1.ServiceReference{Namespace: "ns", Name: "api"}}}
	apiServices.PrepareCreate(remote)
	if *remote.Spec.Service.Port != 443 {
		t.Errorf("port %d", *remote.Spec.Service.Port)
	}
	if got := apiServices.TableRow(remote); !slices.Equal(got, []any{"v1beta1.example.com", "ns/api", "False (NotProxied)", "<unknown>"}) {
		t.Errorf("row %q", got)
	}
	bad := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.wrong"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "example.com", Version: "v1", VersionPriority: 2000, CABundle: []byte("x")}}
	apiServices.PrepareCreate(bad)
	want := []string{"FieldValueInvalid metadata.name", "FieldValueInvalid spec.caBundle", "FieldValueInvalid spec.groupPriorityMinimum", "FieldValueInvalid spec.versionPriority"}
	if got := errs(apiServices.ValidateObject(bad, nil)); !slices.Equal(got, want) {
		t.Errorf("errors\n got %q\nwant %q", got, want)
	}
}
