package customresource

import (
	"slices"
	"strings"

	"github.com/kplane/kplane/apiserver/registry"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CleanupFinalizer keeps a deleted CRD until its custom resources are gone.
const CleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

// CRDs is the customresourcedefinitions resource.
var CRDs = &registry.Def[*apiextv1.CustomResourceDefinition]{
	Info: registry.Info{GroupVersion: apiextv1.SchemeGroupVersion, Resource: "customresourcedefinitions", Singular: "customresourcedefinition",
		Kind: "CustomResourceDefinition", ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}, Status: true},
	NewList:        func() runtime.Object { return &apiextv1.CustomResourceDefinitionList{} },
	Defaults:       defaultCRD,
	Create:         func(c *apiextv1.CustomResourceDefinition) { c.Status.StoredVersions = nil },
	Validate:       func(c *apiextv1.CustomResourceDefinition) field.ErrorList { return ValidateCRD(c) },
	ValidateUpdate: validateCRDUpdate,
	PrepareStatus: func(c, old *apiextv1.CustomResourceDefinition) {
		c.Spec = old.Spec
	},
	Columns: []metav1.TableColumnDefinition{{Name: "Created At", Type: "date", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}},
	Row: func(c *apiextv1.CustomResourceDefinition) []any {
		return []any{c.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z")}
	},
}

// defaultCRD fills what apiextensions.k8s.io/v1 defaults.
func defaultCRD(c *apiextv1.CustomResourceDefinition) {
	n := &c.Spec.Names
	if n.Singular == "" {
		n.Singular = strings.ToLower(n.Kind)
	}
	if n.ListKind == "" && n.Kind != "" {
		n.ListKind = n.Kind + "List"
	}
	if c.Spec.Conversion == nil {
		c.Spec.Conversion = &apiextv1.CustomResourceConversion{Strategy: apiextv1.NoneConverter}
	}
	if w := c.Spec.Conversion.Webhook; w != nil && w.ClientConfig != nil && w.ClientConfig.Service != nil && w.ClientConfig.Service.Port == nil {
		port := int32(443)
		w.ClientConfig.Service.Port = &port
	}
}

var printerColumnTypes = []string{"boolean", "date", "integer", "number", "string"}
var printerColumnFormats = []string{"byte", "date", "date-time", "double", "float", "int32", "int64", "password"}

// ValidateCRD checks a CRD as kube-apiserver does: its name is <plural>.<group>, its names
// are valid, exactly one version is stored, every version has a structural schema, its
// subresources and printer columns are well formed, its conversion is complete.
func ValidateCRD(c *apiextv1.CustomResourceDefinition) field.ErrorList {
	var errs field.ErrorList
	spec := &c.Spec
	sp := field.NewPath("spec")
	if c.Name != spec.Names.Plural+"."+spec.Group {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), c.Name, "must be spec.names.plural+\".\"+spec.group"))
	}
	switch {
	case spec.Group == "":
		errs = append(errs, field.Required(sp.Child("group"), ""))
	case len(strings.Split(spec.Group, ".")) < 2:
		errs = append(errs, field.Invalid(sp.Child("group"), spec.Group, "should be a domain with at least one dot"))
	default:
		for _, msg := range validation.IsDNS1123Subdomain(spec.Group) {
			errs = append(errs, field.Invalid(sp.Child("group"), spec.Group, msg))
		}
	}
	switch spec.Scope {
	case apiextv1.ClusterScoped, apiextv1.NamespaceScoped:
	case "":
		errs = append(errs, field.Required(sp.Child("scope"), ""))
	default:
		errs = append(errs, field.NotSupported(sp.Child("scope"), spec.Scope, []string{string(apiextv1.ClusterScoped), string(apiextv1.NamespaceScoped)}))
	}
	errs = append(errs, validateNames(sp.Child("names"), &spec.Names)...)
	errs = append(errs, validateVersions(sp, spec)...)
	errs = append(errs, validateConversion(sp.Child("conversion"), spec)...)
	if spec.PreserveUnknownFields {
		errs = append(errs, field.Invalid(sp.Child("preserveUnknownFields"), true, "must be false in order to use defaults in the schema"))
	}
	for i, v := range c.Status.StoredVersions {
		if !slices.ContainsFunc(spec.Versions, func(sv apiextv1.CustomResourceDefinitionVersion) bool { return sv.Name == v }) {
			errs = append(errs, field.Invalid(field.NewPath("status", "storedVersions").Index(i), v, "must appear in spec.versions"))
		}
	}
	return errs
}

func validateNames(path *field.Path, n *apiextv1.CustomResourceDefinitionNames) field.ErrorList {
	var errs field.ErrorList
	lowerLabel := func(p *field.Path, v string, required bool) {
		if v == "" {
			if required {
				errs = append(errs, field.Required(p, ""))
			}
			return
		}
		for _, msg := range validation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
	}
	lowerLabel(path.Child("plural"), n.Plural, true)
	lowerLabel(path.Child("singular"), n.Singular, false)
	kind := func(p *field.Path, v string, required bool) {
		if v == "" {
			if required {
				errs = append(errs, field.Required(p, ""))
			}
			return
		}
		for _, msg := range validation.IsDNS1035Label(strings.ToLower(v)) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
	}
	kind(path.Child("kind"), n.Kind, true)
	kind(path.Child("listKind"), n.ListKind, true)
	if n.Kind != "" && n.Kind == n.ListKind {
		errs = append(errs, field.Invalid(path.Child("listKind"), n.ListKind, "kind and listKind may not be the same"))
	}
	for i, s := range n.ShortNames {
		lowerLabel(path.Child("shortNames").Index(i), s, true)
	}
	for i, s := range n.Categories {
		lowerLabel(path.Child("categories").Index(i), s, true)
	}
	return errs
}

func validateVersions(sp *field.Path, spec *apiextv1.CustomResourceDefinitionSpec) field.ErrorList {
	var errs field.ErrorList
	vp := sp.Child("versions")
	if len(spec.Versions) == 0 {
		return append(errs, field.Invalid(vp, spec.Versions, "must have exactly one version marked as storage version"))
	}
	// kube-apiserver judges one schema shared by every version once, at spec.validation
	// (where its internal form of the CRD keeps it).
	shared := sharedSchema(spec.Versions)
	if shared {
		sp := sp.Child("validation", "openAPIV3Schema")
		errs = append(errs, ValidateSchema(sp, spec.Versions[0].Schema.OpenAPIV3Schema)...)
		errs = append(errs, validateRuleDeclarations(sp, spec.Versions[0].Schema.OpenAPIV3Schema)...)
	}
	seen := map[string]bool{}
	storage, served := 0, 0
	for i := range spec.Versions {
		v := &spec.Versions[i]
		p := vp.Index(i)
		if v.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else {
			for _, msg := range validation.IsDNS1035Label(v.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), v.Name, msg))
			}
		}
		if seen[v.Name] {
			errs = append(errs, field.Invalid(vp, spec.Versions, "must contain unique version names"))
		}
		seen[v.Name] = true
		if v.Storage {
			storage++
		}
		if v.Served {
			served++
		}
		switch {
		case v.Schema == nil || v.Schema.OpenAPIV3Schema == nil:
			errs = append(errs, field.Required(p.Child("schema", "openAPIV3Schema"), ""))
		case !shared:
			errs = append(errs, ValidateSchema(p.Child("schema", "openAPIV3Schema"), v.Schema.OpenAPIV3Schema)...)
			errs = append(errs, validateRuleDeclarations(p.Child("schema", "openAPIV3Schema"), v.Schema.OpenAPIV3Schema)...)
		}
		errs = append(errs, validateSubresources(p.Child("subresources"), v)...)
		for j, c := range v.AdditionalPrinterColumns {
			cp := p.Child("additionalPrinterColumns").Index(j)
			if c.Name == "" {
				errs = append(errs, field.Required(cp.Child("name"), ""))
			}
			if c.Type == "" {
				errs = append(errs, field.Required(cp.Child("type"), "must be one of "+strings.Join(printerColumnTypes, ",")))
			} else if !slices.Contains(printerColumnTypes, c.Type) {
				errs = append(errs, field.Invalid(cp.Child("type"), c.Type, "must be one of "+strings.Join(printerColumnTypes, ",")))
			}
			if c.Format != "" && !slices.Contains(printerColumnFormats, c.Format) {
				errs = append(errs, field.Invalid(cp.Child("format"), c.Format, "must be one of "+strings.Join(printerColumnFormats, ",")))
			}
			errs = append(errs, validateJSONPath(cp.Child("JSONPath"), c.JSONPath)...)
		}
		errs = append(errs, validateSelectableFields(p.Child("selectableFields"), v)...)
	}
	if storage != 1 {
		errs = append(errs, field.Invalid(vp, spec.Versions, "must have exactly one version marked as storage version"))
	}
	if served == 0 {
		errs = append(errs, field.Invalid(vp, spec.Versions, "must have at least one served version"))
	}
	return errs
}

// sharedSchema reports whether every version has the same schema.
func sharedSchema(versions []apiextv1.CustomResourceDefinitionVersion) bool {
	if versions[0].Schema == nil || versions[0].Schema.OpenAPIV3Schema == nil {
		return false
	}
	for _, v := range versions[1:] {
		if !equality.Semantic.DeepEqual(v.Schema, versions[0].Schema) {
			return false
		}
	}
	return true
}

// validateJSONPath requires a simple path starting with "." that kplane can evaluate.
func validateJSONPath(p *field.Path, s string) field.ErrorList {
	switch {
	case s == "":
		return field.ErrorList{field.Required(p, "")}
	case s[0] != '.':
		return field.ErrorList{field.Invalid(p, s, "must be a simple json path starting with .")}
	}
	if _, err := ParsePath(s); err != nil {
		return field.ErrorList{field.Invalid(p, s, err.Error())}
	}
	return nil
}

func validateSubresources(p *field.Path, v *apiextv1.CustomResourceDefinitionVersion) field.ErrorList {
	if v.Subresources == nil || v.Subresources.Scale == nil {
		return nil
	}
	var errs field.ErrorList
	sc := v.Subresources.Scale
	sp := p.Child("scale")
	errs = append(errs, validateJSONPath(sp.Child("specReplicasPath"), sc.SpecReplicasPath)...)
	if !strings.HasPrefix(sc.SpecReplicasPath, ".spec.") {
		errs = append(errs, field.Invalid(sp.Child("specReplicasPath"), sc.SpecReplicasPath, "should be a json path under .spec"))
	}
	errs = append(errs, validateJSONPath(sp.Child("statusReplicasPath"), sc.StatusReplicasPath)...)
	if !strings.HasPrefix(sc.StatusReplicasPath, ".status.") {
		errs = append(errs, field.Invalid(sp.Child("statusReplicasPath"), sc.StatusReplicasPath, "should be a json path under .status"))
	}
	if sc.LabelSelectorPath != nil {
		errs = append(errs, validateJSONPath(sp.Child("labelSelectorPath"), *sc.LabelSelectorPath)...)
		if !strings.HasPrefix(*sc.LabelSelectorPath, ".spec.") && !strings.HasPrefix(*sc.LabelSelectorPath, ".status.") {
			errs = append(errs, field.Invalid(sp.Child("labelSelectorPath"), *sc.LabelSelectorPath, "should be a json path under either .spec or .status"))
		}
	}
	return errs
}

// validateSelectableFields requires each selectable field to name a scalar field of the
// schema outside metadata, at most 8 of them, without repeats.
func validateSelectableFields(p *field.Path, v *apiextv1.CustomResourceDefinitionVersion) field.ErrorList {
	var errs field.ErrorList
	if len(v.SelectableFields) > 8 {
		errs = append(errs, field.TooMany(p, len(v.SelectableFields), 8))
	}
	seen := map[string]bool{}
	for i, f := range v.SelectableFields {
		fp := p.Index(i).Child("jsonPath")
		if f.JSONPath == "" {
			errs = append(errs, field.Required(fp, ""))
			continue
		}
		if seen[f.JSONPath] {
			errs = append(errs, field.Duplicate(fp, f.JSONPath))
		}
		seen[f.JSONPath] = true
		if strings.HasPrefix(f.JSONPath, ".metadata") {
			errs = append(errs, field.Invalid(fp, f.JSONPath, "must not point to fields in metadata"))
			continue
		}
		node := (*apiextv1.JSONSchemaProps)(nil)
		if v.Schema != nil {
			node = v.Schema.OpenAPIV3Schema
		}
		for _, part := range strings.Split(strings.TrimPrefix(f.JSONPath, "."), ".") {
			if node == nil {
				break
			}
			next, ok := node.Properties[part]
			if !ok {
				node = nil
				break
			}
			node = &next
		}
		switch {
		case node == nil:
			errs = append(errs, field.Invalid(fp, f.JSONPath, "is an invalid path: does not refer to a valid field"))
		case node.Type != "string" && node.Type != "boolean" && node.Type != "integer":
			errs = append(errs, field.Invalid(fp, f.JSONPath, "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."))
		}
	}
	return errs
}

func validateConversion(p *field.Path, spec *apiextv1.CustomResourceDefinitionSpec) field.ErrorList {
	conv := spec.Conversion
	if conv == nil {
		return nil
	}
	var errs field.ErrorList
	switch conv.Strategy {
	case apiextv1.NoneConverter:
		if conv.Webhook != nil {
			errs = append(errs, field.Forbidden(p.Child("webhook"), "should not be set when strategy is not set to Webhook"))
		}
	case apiextv1.WebhookConverter:
		if conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
			errs = append(errs, field.Required(p.Child("webhook", "clientConfig"), "required when strategy is set to Webhook"))
			break
		}
		cc := conv.Webhook.ClientConfig
		cp := p.Child("webhook", "clientConfig")
		switch {
		case cc.URL == nil && cc.Service == nil:
			errs = append(errs, field.Required(cp, "exactly one of url or service is required"))
		case cc.URL != nil && cc.Service != nil:
			errs = append(errs, field.Required(cp, "exactly one of url or service is required"))
		case cc.URL != nil && !strings.HasPrefix(*cc.URL, "https://"):
			errs = append(errs, field.Invalid(cp.Child("url"), *cc.URL, "'https' is the only allowed URL scheme"))
		case cc.Service != nil && (cc.Service.Name == "" || cc.Service.Namespace == ""):
			errs = append(errs, field.Required(cp.Child("service"), "name and namespace are required"))
		}
		versions := conv.Webhook.ConversionReviewVersions
		if len(versions) == 0 {
			errs = append(errs, field.Required(p.Child("webhook", "conversionReviewVersions"), "must include at least one of v1, v1beta1"))
		} else if !slices.Contains(versions, "v1") && !slices.Contains(versions, "v1beta1") {
			errs = append(errs, field.Invalid(p.Child("webhook", "conversionReviewVersions"), versions, "must include at least one of v1, v1beta1"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy"), conv.Strategy, []string{string(apiextv1.NoneConverter), string(apiextv1.WebhookConverter)}))
	}
	return errs
}

// validateCRDUpdate keeps what may not change: the group and scope, and the accepted plural
// (the resource's URL) once the CRD is established.
func validateCRDUpdate(c, old *apiextv1.CustomResourceDefinition) field.ErrorList {
	var errs field.ErrorList
	sp := field.NewPath("spec")
	if c.Spec.Group != old.Spec.Group {
		errs = append(errs, field.Invalid(sp.Child("group"), c.Spec.Group, "field is immutable"))
	}
	if c.Spec.Scope != old.Spec.Scope {
		errs = append(errs, field.Invalid(sp.Child("scope"), c.Spec.Scope, "field is immutable"))
	}
	if Established(old) && c.Spec.Names.Plural != old.Status.AcceptedNames.Plural && old.Status.AcceptedNames.Plural != "" {
		errs = append(errs, field.Invalid(sp.Child("names", "plural"), c.Spec.Names.Plural, "field is immutable once the resource is established"))
	}
	return errs
}

// Established reports whether c's Established condition is true.
func Established(c *apiextv1.CustomResourceDefinition) bool {
	return Condition(c, apiextv1.Established) == apiextv1.ConditionTrue
}

// Condition returns the status of a condition of c ("" if absent).
func Condition(c *apiextv1.CustomResourceDefinition, t apiextv1.CustomResourceDefinitionConditionType) apiextv1.ConditionStatus {
	for _, cond := range c.Status.Conditions {
		if cond.Type == t {
			return cond.Status
		}
	}
	return ""
}

// SetCondition sets a condition of c, keeping its transition time when the status is the
// same, and reports whether anything changed.
func SetCondition(c *apiextv1.CustomResourceDefinition, cond apiextv1.CustomResourceDefinitionCondition) bool {
	for i, cur := range c.Status.Conditions {
		if cur.Type != cond.Type {
			continue
		}
		if cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
			return false
		}
		if cur.Status == cond.Status {
			cond.LastTransitionTime = cur.LastTransitionTime
		}
		c.Status.Conditions[i] = cond
		return true
	}
	c.Status.Conditions = append(c.Status.Conditions, cond)
	return true
}

// StorageVersion is the name of c's storage version.
func StorageVersion(c *apiextv1.CustomResourceDefinition) string {
	for _, v := range c.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}
