package registry

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newRoleBinding(change func(*rbacv1.RoleBinding)) *rbacv1.RoleBinding {
	b := &rbacv1.RoleBinding{ObjectMeta: meta("read-pods"),
		RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "jane"}, {Kind: rbacv1.GroupKind, Name: "devs"},
			{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: "ns"}}}
	if change != nil {
		change(b)
	}
	return b
}

// TestRoleBindingDefaults: the role's API group and users' and groups' are RBAC's; a service
// account's stays the core group.
func TestRoleBindingDefaults(t *testing.T) {
	b := newRoleBinding(nil)
	roleBindings.PrepareCreate(b)
	if b.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("roleRef.apiGroup %q", b.RoleRef.APIGroup)
	}
	if got := []string{b.Subjects[0].APIGroup, b.Subjects[1].APIGroup, b.Subjects[2].APIGroup}; !slices.Equal(got, []string{rbacv1.GroupName, rbacv1.GroupName, ""}) {
		t.Errorf("subjects' apiGroups %q", got)
	}
	if errs := roleBindings.ValidateObject(b, nil); len(errs) > 0 {
		t.Errorf("defaulted binding invalid: %v", errs)
	}
}

func TestValidateRBAC(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  Object
		def  Strategy
		want []string
	}{
		{"role", &rbacv1.Role{ObjectMeta: meta("r"), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}, roles, nil},
		{"role rules", &rbacv1.Role{ObjectMeta: meta("r"), Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get"}},
			{NonResourceURLs: []string{"/healthz"}, Resources: []string{"pods"}},
		}}, roles, []string{"FieldValueInvalid rules[1].nonResourceURLs", "FieldValueInvalid rules[1].nonResourceURLs",
			"FieldValueRequired rules[0].apiGroups", "FieldValueRequired rules[0].resources", "FieldValueRequired rules[1].verbs"}},
		{"role name with a slash", &rbacv1.Role{ObjectMeta: meta("a/b")}, roles, []string{"FieldValueInvalid metadata.name"}},
		{"cluster role: non-resource URLs and a colon in the name", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:health"},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}}}}, clusterRoles, nil},
		{"aggregation without selectors", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, AggregationRule: &rbacv1.AggregationRule{}},
			clusterRoles, []string{"FieldValueRequired aggregationRule.clusterRoleSelectors"}},
		{"aggregation bad selector", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, AggregationRule: &rbacv1.AggregationRule{
			ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"a": "no good"}}}}},
			clusterRoles, []string{"FieldValueInvalid aggregationRule.clusterRoleSelectors[0].matchLabels"}},
		{"binding", newRoleBinding(nil), roleBindings, nil},
		{"binding to a deployment", newRoleBinding(func(b *rbacv1.RoleBinding) {
			b.RoleRef = rbacv1.RoleRef{APIGroup: "apps", Kind: "Deployment"}
		}), roleBindings, []string{"FieldValueNotSupported roleRef.apiGroup", "FieldValueNotSupported roleRef.kind", "FieldValueRequired roleRef.name"}},
		{"binding subjects", newRoleBinding(func(b *rbacv1.RoleBinding) {
			b.Subjects = []rbacv1.Subject{{Kind: "Robot", Name: "r2"}, {Kind: rbacv1.ServiceAccountKind, Name: "Bad_Name", APIGroup: "x"},
				{Kind: rbacv1.UserKind, APIGroup: "x"}}
		}), roleBindings, []string{"FieldValueInvalid subjects[1].name", "FieldValueNotSupported subjects[0].kind",
			"FieldValueNotSupported subjects[1].apiGroup", "FieldValueNotSupported subjects[2].apiGroup", "FieldValueRequired subjects[2].name"}},
		{"cluster binding to a role, service account without namespace", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "crb"},
			RoleRef:  rbacv1.RoleRef{Kind: "Role", Name: "r"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default"}}},
			clusterRoleBindings, []string{"FieldValueNotSupported roleRef.kind", "FieldValueRequired subjects[0].namespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.def.PrepareCreate(tc.obj)
			if got := errs(tc.def.ValidateObject(tc.obj, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestRoleRefImmutable: a binding's subjects change, its role does not.
func TestRoleRefImmutable(t *testing.T) {
	old := newRoleBinding(nil)
	roleBindings.PrepareCreate(old)
	old.ResourceVersion = "1"
	b := old.DeepCopy()
	b.Subjects = b.Subjects[:1]
	roleBindings.PrepareUpdate(b, old, "")
	if got := errs(roleBindings.ValidateObject(b, old)); len(got) > 0 {
		t.Errorf("subjects change: %q", got)
	}
	b.RoleRef.Name = "other"
	if got, want := errs(roleBindings.ValidateObject(b, old)), []string{"FieldValueInvalid roleRef"}; !slices.Equal(got, want) {
		t.Errorf("roleRef change: %q, want %q", got, want)
	}
}

func TestRBACRows(t *testing.T) {
	created := metav1.Date(2026, 1, 2, 3, 4, 5, 0, metav1.Now().Location())
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "r", CreationTimestamp: created}}
	if got := roles.TableRow(role); !slices.Equal(got, []any{"r", created.UTC().Format("2006-01-02T15:04:05Z")}) {
		t.Errorf("role row %q", got)
	}
	if cols := roles.TableColumns(); cols[1].Name != "Created At" || cols[1].Type != "date" {
		t.Errorf("role columns %+v", cols)
	}
	b := newRoleBinding(nil)
	got := roleBindings.TableRow(b)
	want := []any{"read-pods", "Role/pod-reader", "<unknown>", "jane", "devs", "ns/default"}
	if !slices.Equal(got, want) {
		t.Errorf("binding row %q, want %q", got, want)
	}
	var names []string
	for _, c := range clusterRoleBindings.TableColumns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"}; !slices.Equal(names, want) {
		t.Errorf("binding columns %q", names)
	}
}
