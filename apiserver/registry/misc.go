package registry

import (
	"encoding/json"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var events = &Def[*corev1.Event]{
	Info:    Info{GroupVersion: coreV1, Resource: "events", Singular: "event", Kind: "Event", ShortNames: []string{"ev"}, Namespaced: true},
	NewList: func() runtime.Object { return &corev1.EventList{} },
	// Writes of core events keep the older API's rules (events.go).
	Validate: func(e *corev1.Event) field.ErrorList { return validateEvent(e, false) },
	Fields: func(e *corev1.Event) fields.Set {
		o := e.InvolvedObject
		return fields.Set{
			"involvedObject.kind":            o.Kind,
			"involvedObject.namespace":       o.Namespace,
			"involvedObject.name":            o.Name,
			"involvedObject.uid":             string(o.UID),
			"involvedObject.apiVersion":      o.APIVersion,
			"involvedObject.resourceVersion": o.ResourceVersion,
			"involvedObject.fieldPath":       o.FieldPath,
			"reason":                         e.Reason,
			"reportingComponent":             e.ReportingController,
			"source":                         or(e.Source.Component, e.ReportingController),
			"type":                           e.Type,
		}
	},
	Columns: columns(
		Column("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
		Column("Type", "string", 0, "Type of this event (Normal, Warning)."),
		Column("Reason", "string", 0, "A short, machine understandable string that gives the reason for the transition into the object's current status."),
		Column("Object", "string", 0, "The object that this event is about."),
		Column("Subobject", "string", 1, "The part of the object this event is about."),
		Column("Source", "string", 1, "The component reporting this event."),
		Column("Message", "string", 0, "A human-readable description of the status of this operation."),
		Column("First Seen", "string", 1, "The time at which the event was first recorded."),
		Column("Count", "string", 1, "The number of times this event has occurred."),
	),
	Row:      eventRow,
	NameLast: true,
}

func eventRow(e *corev1.Event) []any {
	first := Age(e.FirstTimestamp)
	if e.FirstTimestamp.IsZero() {
		first = Age(metav1.Time(e.EventTime))
	}
	last := Age(e.LastTimestamp)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last, count = Age(metav1.Time(e.Series.LastObservedTime)), e.Series.Count
	} else if count == 0 {
		count = 1 // events of the newer API are singletons without a count
	}
	object := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		object += "/" + e.InvolvedObject.Name
	}
	source := or(e.Source.Component, e.ReportingController)
	if host := or(e.Source.Host, e.ReportingInstance); host != "" {
		source += ", " + host
	}
	return []any{last, e.Type, e.Reason, object, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count)}
}

var secrets = &Def[*corev1.Secret]{
	Info:    Info{GroupVersion: coreV1, Resource: "secrets", Singular: "secret", Kind: "Secret", Namespaced: true},
	NewList: func() runtime.Object { return &corev1.SecretList{} },
	Defaults: func(s *corev1.Secret) {
		s.Type = or(s.Type, corev1.SecretTypeOpaque)
		// stringData is write-only: it is merged into data, over keys of the same name.
		for k, v := range s.StringData {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	},
	Validate: validateSecret,
	ValidateUpdate: func(s, old *corev1.Secret) field.ErrorList {
		var errs field.ErrorList
		if s.Type != old.Type {
			errs = append(errs, immutable(s.Type, field.NewPath("type"))...)
		}
		if deref(old.Immutable) {
			if !deref(s.Immutable) {
				errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
			}
			if !apiequality.Semantic.DeepEqual(s.Data, old.Data) {
				errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
			}
		}
		return errs
	},
	Fields:  func(s *corev1.Secret) fields.Set { return fields.Set{"type": string(s.Type)} },
	Columns: columns(Column("Type", "string", 0, "Used to facilitate programmatic handling of secret data."), Column("Data", "string", 0, "Number of data entries."), AgeColumn),
	Row: func(s *corev1.Secret) []any {
		return []any{string(s.Type), int64(len(s.Data)), Age(s.CreationTimestamp)}
	},
}

// validateSecret checks the keys and size of a secret and the keys its type promises consumers.
func validateSecret(s *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	data := field.NewPath("data")
	size := 0
	for k, v := range s.Data {
		errs = append(errs, msgs(data.Key(k), k, validation.IsConfigMapKey(k))...)
		size += len(v)
	}
	if size > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(data, "", corev1.MaxSecretSize))
	}
	require := func(keys ...string) {
		for _, k := range keys {
			if _, ok := s.Data[k]; !ok {
				errs = append(errs, field.Required(data.Key(k), ""))
			}
		}
	}
	validJSON := func(k string) {
		if v, ok := s.Data[k]; ok && !json.Valid(v) {
			errs = append(errs, field.Invalid(data.Key(k), "<secret contents redacted>", "must be valid JSON"))
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(field.NewPath("metadata", "annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg:
		require(corev1.DockerConfigKey)
		validJSON(corev1.DockerConfigKey)
	case corev1.SecretTypeDockerConfigJson:
		require(corev1.DockerConfigJsonKey)
		validJSON(corev1.DockerConfigJsonKey)
	case corev1.SecretTypeBasicAuth:
		if s.Data[corev1.BasicAuthUsernameKey] == nil && s.Data[corev1.BasicAuthPasswordKey] == nil {
			require(corev1.BasicAuthUsernameKey, corev1.BasicAuthPasswordKey)
		}
	case corev1.SecretTypeSSHAuth:
		require(corev1.SSHAuthPrivateKey)
	case corev1.SecretTypeTLS:
		require(corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	return errs
}

var serviceAccounts = &Def[*corev1.ServiceAccount]{
	Info: Info{GroupVersion: coreV1, Resource: "serviceaccounts", Singular: "serviceaccount", Kind: "ServiceAccount",
		ShortNames: []string{"sa"}, Namespaced: true},
	NewList: func() runtime.Object { return &corev1.ServiceAccountList{} },
	// Kubernetes no longer shows a Secrets column: tokens are projected, not stored as secrets.
}

var leases = &Def[*coordinationv1.Lease]{
	Info:    Info{GroupVersion: coordinationV1, Resource: "leases", Singular: "lease", Kind: "Lease", Namespaced: true},
	NewList: func() runtime.Object { return &coordinationv1.LeaseList{} },
	Validate: func(l *coordinationv1.Lease) field.ErrorList {
		p := field.NewPath("spec")
		errs := positive32(l.Spec.LeaseDurationSeconds, p.Child("leaseDurationSeconds"))
		if l.Spec.LeaseTransitions != nil {
			errs = append(errs, nonNegative(*l.Spec.LeaseTransitions, p.Child("leaseTransitions"))...)
		}
		return errs
	},
	Columns: columns(Column("Holder", "string", 0, "The identity of the current holder of the lease."), AgeColumn),
	Row: func(l *coordinationv1.Lease) []any {
		return []any{deref(l.Spec.HolderIdentity), Age(l.CreationTimestamp)}
	},
}
