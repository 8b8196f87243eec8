package registry

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// apiregistration.k8s.io/v1: APIServices are stored and validated as kube-aggregator does. The
// server registers one local APIService (no spec.service) per group version it serves itself,
// at start, as kube-apiserver does, so that `kubectl get apiservices` lists what is served and
// tools that wait for an APIService to be Available (metrics.k8s.io, for one) find it. kplane
// has no aggregation layer: an APIService that names a service is stored but nothing proxies
// to it: it is created with an Available condition False, reason NotProxied, and nothing
// changes that but its clients.

var apiregistrationV1 = apiregistrationv1.SchemeGroupVersion

var apiServices = &Def[*apiregistrationv1.APIService]{
	Info: Info{GroupVersion: apiregistrationV1, Resource: "apiservices", Singular: "apiservice", Kind: "APIService",
		Categories: apiExtensionsCategory, Status: true},
	NewList: func() runtime.Object { return &apiregistrationv1.APIServiceList{} },
	// The name is checked against the spec in Validate, which sees both.
	NameValidation: path.ValidatePathSegmentName,
	Defaults: func(a *apiregistrationv1.APIService) {
		if s := a.Spec.Service; s != nil {
			s.Port = orPtr(s.Port, 443)
		}
	},
	Create: func(a *apiregistrationv1.APIService) {
		// What the server serves itself is available as soon as it is registered; what another
		// server would serve never is, and says why.
		available := apiregistrationv1.APIServiceCondition{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Reason: "Local", Message: "Local APIServices are always available"}
		if a.Spec.Service != nil {
			available.Status, available.Reason = apiregistrationv1.ConditionFalse, "NotProxied"
			available.Message = "kplane has no aggregation layer: requests for this group version are not passed to the service"
		}
		a.Status.Conditions = []apiregistrationv1.APIServiceCondition{available}
	},
	PrepareStatus: func(a, old *apiregistrationv1.APIService) {
		// A status write changes the status only.
		a.Labels, a.Annotations, a.Finalizers, a.OwnerReferences = old.Labels, old.Annotations, old.Finalizers, old.OwnerReferences
	},
	Validate: validateAPIService,
	Columns: columns(
		Column("Service", "string", 0, "The reference to the service that hosts this API endpoint."),
		Column("Available", "string", 0, "Whether this service is available."),
		AgeColumn,
	),
	Row: func(a *apiregistrationv1.APIService) []any {
		service := "Local"
		if s := a.Spec.Service; s != nil {
			service = s.Namespace + "/" + s.Name
		}
		available := string(apiregistrationv1.ConditionUnknown)
		for _, c := range a.Status.Conditions {
			if c.Type != apiregistrationv1.Available {
				continue
			}
			available = string(c.Status)
			if c.Status != apiregistrationv1.ConditionTrue && c.Reason != "" {
				available += " (" + c.Reason + ")"
			}
			break
		}
		return []any{service, available, Age(a.CreationTimestamp)}
	},
}

func validateAPIService(a *apiregistrationv1.APIService) field.ErrorList {
	var errs field.ErrorList
	s := &a.Spec
	p := specPath
	if want := s.Version + "." + s.Group; a.Name != want {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), a.Name, fmt.Sprintf("must be `spec.version+\".\"+spec.group`: %q", want)))
	}
	if s.Group == "" && s.Version != "v1" {
		errs = append(errs, field.Required(p.Child("group"), "only v1 may have an empty group and it better be legacy kube"))
	}
	if s.Group != "" {
		errs = append(errs, dnsSubdomain(s.Group, p.Child("group"))...)
	}
	errs = append(errs, msgs(p.Child("version"), s.Version, validation.IsDNS1035Label(s.Version))...)
	if s.GroupPriorityMinimum <= 0 || s.GroupPriorityMinimum > 20000 {
		errs = append(errs, field.Invalid(p.Child("groupPriorityMinimum"), s.GroupPriorityMinimum, "must be positive and less than 20000"))
	}
	if s.VersionPriority <= 0 || s.VersionPriority > 1000 {
		errs = append(errs, field.Invalid(p.Child("versionPriority"), s.VersionPriority, "must be positive and less than 1000"))
	}
	if s.Service == nil {
		// Served by this server: there is no connection to secure.
		if len(s.CABundle) != 0 {
			errs = append(errs, field.Invalid(p.Child("caBundle"), fmt.Sprintf("%d bytes", len(s.CABundle)), "local APIServices may not have a caBundle"))
		}
		if s.InsecureSkipTLSVerify {
			errs = append(errs, field.Invalid(p.Child("insecureSkipTLSVerify"), true, "local APIServices may not have insecureSkipTLSVerify"))
		}
	} else {
		sp := p.Child("service")
		if s.Service.Namespace == "" {
			errs = append(errs, field.Required(sp.Child("namespace"), ""))
		}
		if s.Service.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		}
		if port := deref(s.Service.Port); len(validation.IsValidPortNum(int(port))) > 0 {
			errs = append(errs, field.Invalid(sp.Child("port"), port, "port is not valid: "+strings.Join(validation.IsValidPortNum(int(port)), ", ")))
		}
		if s.InsecureSkipTLSVerify && len(s.CABundle) > 0 {
			errs = append(errs, field.Invalid(p.Child("insecureSkipTLSVerify"), true, "may not be true if caBundle is present"))
		}
	}
	statuses := []apiregistrationv1.ConditionStatus{apiregistrationv1.ConditionFalse, apiregistrationv1.ConditionTrue, apiregistrationv1.ConditionUnknown}
	for i, c := range a.Status.Conditions {
		errs = append(errs, enum(&c.Status, field.NewPath("status", "conditions").Index(i).Child("status"), statuses)...)
	}
	return errs
}

// apiServicePriorities are kube-apiserver's priorities of its own group versions (discovery
// orders groups by them); a group version not listed gets defaultAPIServicePriority.
var apiServicePriorities = map[schema.GroupVersion][2]int32{
	{Version: "v1"}: {18000, 1},
	{Group: "admissionregistration.k8s.io", Version: "v1"}: {16700, 15},
	{Group: "apiextensions.k8s.io", Version: "v1"}:         {16700, 15},
	{Group: "apps", Version: "v1"}:                         {17800, 15},
	{Group: "authentication.k8s.io", Version: "v1"}:        {17700, 15},
	{Group: "authorization.k8s.io", Version: "v1"}:         {17600, 15},
	{Group: "autoscaling", Version: "v1"}:                  {17500, 15},
	{Group: "autoscaling", Version: "v2"}:                  {17500, 30},
	{Group: "batch", Version: "v1"}:                        {17400, 15},
	{Group: "certificates.k8s.io", Version: "v1"}:          {17300, 15},
	{Group: "coordination.k8s.io", Version: "v1"}:          {16500, 15},
	{Group: "discovery.k8s.io", Version: "v1"}:             {16200, 15},
	{Group: "events.k8s.io", Version: "v1"}:                {17750, 15},
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1"}: {16100, 21},
	{Group: "networking.k8s.io", Version: "v1"}:            {17200, 15},
	{Group: "node.k8s.io", Version: "v1"}:                  {16300, 15},
	{Group: "policy", Version: "v1"}:                       {17100, 15},
	{Group: "rbac.authorization.k8s.io", Version: "v1"}:    {17000, 15},
	{Group: "resource.k8s.io", Version: "v1"}:              {16200, 21},
	{Group: "scheduling.k8s.io", Version: "v1"}:            {16600, 15},
	{Group: "storage.k8s.io", Version: "v1"}:               {16800, 15},
	// Not kube-apiserver's own: metrics-server registers it with these.
	{Group: "metrics.k8s.io", Version: "v1beta1"}: {100, 100},
}

// defaultAPIServicePriority is what a served group version missing from apiServicePriorities
// gets: last among groups.
var defaultAPIServicePriority = [2]int32{1000, 15}

// LocalAPIService is the APIService of a group version this server serves itself, as
// kube-apiserver registers it at start ("onstart": created when missing, never updated).
func LocalAPIService(gv schema.GroupVersion) *apiregistrationv1.APIService {
	prio, ok := apiServicePriorities[gv]
	if !ok {
		prio = defaultAPIServicePriority
	}
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: gv.Version + "." + gv.Group,
			Labels: map[string]string{"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
		Spec: apiregistrationv1.APIServiceSpec{Group: gv.Group, Version: gv.Version,
			GroupPriorityMinimum: prio[0], VersionPriority: prio[1]},
	}
}
