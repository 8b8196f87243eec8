package apiserver_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestAccessReviews: every review of a well-formed question answers allowed, saying why;
// malformed ones get a 422 with causes; other verbs and paths are refused.
func TestAccessReviews(t *testing.T) {
	ns := namespace(t)
	const prefix = "/apis/authorization.k8s.io/v1/"
	pods := map[string]any{"verb": "get", "resource": "pods", "namespace": ns}
	review := func(kind string, spec map[string]any, meta map[string]any) map[string]any {
		return map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": kind, "metadata": meta, "spec": spec}
	}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		code       int
		causes     []string
	}{
		{"subject", prefix + "subjectaccessreviews",
			review("SubjectAccessReview", map[string]any{"user": "jane", "resourceAttributes": pods}, nil), http.StatusCreated, nil},
		{"subject without user", prefix + "subjectaccessreviews",
			review("SubjectAccessReview", map[string]any{"nonResourceAttributes": map[string]any{"path": "/healthz", "verb": "get"}}, nil),
			http.StatusUnprocessableEntity, []string{"spec.user: FieldValueInvalid"}},
		{"subject with both attributes and a name", prefix + "subjectaccessreviews",
			review("SubjectAccessReview", map[string]any{"groups": []string{"devs"}, "resourceAttributes": pods,
				"nonResourceAttributes": map[string]any{"path": "/healthz"}}, map[string]any{"name": "x"}),
			http.StatusUnprocessableEntity, []string{"metadata: FieldValueInvalid", "spec.nonResourceAttributes: FieldValueInvalid"}},
		{"self", prefix + "selfsubjectaccessreviews",
			review("SelfSubjectAccessReview", map[string]any{"resourceAttributes": pods}, nil), http.StatusCreated, nil},
		{"self without attributes", prefix + "selfsubjectaccessreviews",
			review("SelfSubjectAccessReview", map[string]any{}, nil), http.StatusUnprocessableEntity, []string{"spec.resourceAttributes: FieldValueInvalid"}},
		{"self with a bad label selector", prefix + "selfsubjectaccessreviews",
			review("SelfSubjectAccessReview", map[string]any{"resourceAttributes": map[string]any{"verb": "list", "resource": "pods",
				"labelSelector": map[string]any{}}}, nil),
			http.StatusUnprocessableEntity, []string{"spec.resourceAttributes.labelSelector.requirements: FieldValueRequired"}},
		{"local", prefix + "namespaces/" + ns + "/localsubjectaccessreviews",
			review("LocalSubjectAccessReview", map[string]any{"user": "jane", "resourceAttributes": pods}, nil), http.StatusCreated, nil},
		{"local about another namespace", prefix + "namespaces/" + ns + "/localsubjectaccessreviews",
			review("LocalSubjectAccessReview", map[string]any{"user": "jane", "resourceAttributes": map[string]any{"verb": "get", "namespace": "other"}}, nil),
			http.StatusUnprocessableEntity, []string{"spec.resourceAttributes.namespace: FieldValueInvalid"}},
		{"local at the cluster", prefix + "localsubjectaccessreviews",
			review("LocalSubjectAccessReview", map[string]any{"user": "jane", "resourceAttributes": pods}, nil), http.StatusNotFound, nil},
		{"rules", prefix + "selfsubjectrulesreviews",
			review("SelfSubjectRulesReview", map[string]any{"namespace": ns}, nil), http.StatusCreated, nil},
		{"rules without namespace", prefix + "selfsubjectrulesreviews",
			review("SelfSubjectRulesReview", map[string]any{}, nil), http.StatusBadRequest, nil},
		{"unknown review", prefix + "everythingreviews", map[string]any{}, http.StatusNotFound, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", tc.path, tc.body)
			if r.code != tc.code {
				t.Fatalf("code %d, want %d: %s", r.code, tc.code, r.body)
			}
			if got := causes(t, r); !slices.Equal(got, tc.causes) {
				t.Errorf("causes %q, want %q", got, tc.causes)
			}
			if r.code != http.StatusCreated {
				return
			}
			m := r.object(t)
			if kind := tc.body["kind"]; m["kind"] != kind {
				t.Errorf("kind %v, want %v", m["kind"], kind)
			}
			if kind := tc.body["kind"]; kind == "SelfSubjectRulesReview" {
				if get(m, "status", "resourceRules", 0, "verbs", 0) != "*" || get(m, "status", "nonResourceRules", 0, "nonResourceURLs", 0) != "*" {
					t.Errorf("rules %v", m["status"])
				}
				return
			}
			reason, _ := get(m, "status", "reason").(string)
			if get(m, "status", "allowed") != true || !strings.Contains(reason, "every request is allowed") {
				t.Errorf("status %v", m["status"])
			}
		})
	}
	if r := do(t, "GET", prefix+"subjectaccessreviews", nil); r.code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d %s", r.code, r.body)
	}
}
