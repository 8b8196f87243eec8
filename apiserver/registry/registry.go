// Package registry describes each served resource: its names and scope, defaults, validation,
// the spec/status split, selectable fields and table columns. Adding a resource is one Def value
// in one file of this package, appended to All.
//
// Some resources are only stored, defaulted, validated and served, with no kplane behaviour
// behind them yet; each group's file says what is missing. RBAC (rbac.go) is not enforced and
// its writes get no escalation checks; webhooks and admission policies
// (admissionregistration.go) are not called or evaluated; CertificateSigningRequests
// (certificates.go) are not signed; flow control (flowcontrol.go) does not classify or queue
// requests; APIServices (apiregistration.go) are not proxied.
package registry

import (
	"context"
	"fmt"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Object is what every stored API object is: a runtime.Object with ObjectMeta.
type Object interface {
	runtime.Object
	metav1.Object
}

// Info is the static description of a resource, as discovery and the REST layer need it.
type Info struct {
	GroupVersion schema.GroupVersion
	Resource     string // plural, lower case: "pods"
	Singular     string
	Kind         string // "Pod"
	ShortNames   []string
	Categories   []string
	Namespaced   bool
	Status       bool // has a status subresource
	Scale        bool // has a scale subresource (replicas in spec, status.replicas, selector)
	Binding      bool // pods/binding
	// StoredUnder, when set, is the resource whose storage keys hold this one's objects:
	// events.k8s.io Events are core Events, one object whichever group serves it.
	StoredUnder schema.GroupResource
	// Approval is a certificatesigningrequests/approval-style subresource: a status write that
	// only the approval conditions go through.
	Approval bool
}

// GroupResource names the resource for errors and storage keys.
func (i *Info) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: i.GroupVersion.Group, Resource: i.Resource}
}

// GVK is the kind served at this resource's endpoint.
func (i *Info) GVK() schema.GroupVersionKind { return i.GroupVersion.WithKind(i.Kind) }

// Hooks lets a resource reach server-side services (allocators) while it is created, updated or
// deleted. Claims are storage keys the object holds exclusively (a ClusterIP, a NodePort); the
// storage layer takes and releases them in the same transaction as the object itself.
type Hooks interface {
	// Taken reports whether a claim is already held by some object. Claims are short relative
	// keys such as "serviceips/10.96.0.10" or "nodeports/30080"; storage keeps them under its own prefix.
	Taken(ctx context.Context, key string) (bool, error)
}

// Objects lets admission read the other resources the server stores, as Kubernetes' admission
// plugins read them through informers: the StorageClasses a new claim's default comes from.
type Objects interface {
	// List returns every object of a resource (all namespaces), as a consistent read.
	List(ctx context.Context, gr schema.GroupResource) ([]Object, error)
	// Get returns one object, or a NotFound error.
	Get(ctx context.Context, gr schema.GroupResource, namespace, name string) (Object, error)
}

// Strategy is the type-erased view of a Def that the REST layer uses.
type Strategy interface {
	Describe() *Info
	NewObject() Object
	NewListObject() runtime.Object
	// PrepareCreate clears what a client may not set on create, applies defaults and prepares
	// the new object (its Create step). The object has its name and UID.
	PrepareCreate(obj Object)
	// PrepareForAdmission is PrepareCreate without the Create step: the new object as the
	// admission plugins and webhooks see it, before the server gives it its identity.
	PrepareForAdmission(obj Object)
	// PrepareUpdate keeps what the written part of the object may not change: a spec write keeps
	// the stored status, a status write keeps the stored spec; generation bumps on spec change.
	// subresource is "" for writes of the object itself, else "status", "scale", "finalize".
	PrepareUpdate(obj, old Object, subresource string)
	// Allocate fills server-assigned values (ClusterIP, NodePorts); old is nil on create.
	AllocateFor(ctx context.Context, h Hooks, obj, old Object) field.ErrorList
	// AdmitFor runs the resource's built-in mutating admission on a write, after PrepareCreate
	// or PrepareUpdate and before the mutating admission policies and webhooks; old is nil on
	// create. The error (403, usually) refuses the write.
	AdmitFor(ctx context.Context, objs Objects, obj, old Object, subresource string) error
	// ValidateAdmissionFor runs the resource's built-in validating admission on the object as
	// validated, before the validating admission policies and webhooks; old is nil on create.
	ValidateAdmissionFor(ctx context.Context, objs Objects, obj, old Object, subresource string) error
	// PrepareCreateFromRequest sets what a new object takes from the request that creates it
	// (its user), after admission, so that no admission plugin or webhook can change it.
	PrepareCreateFromRequest(ctx context.Context, obj Object)
	// Validate checks obj; old is nil on create.
	ValidateObject(obj, old Object) field.ErrorList
	// ValidateSubresourceWrite adds the checks of a write through subresource (not "") to
	// those of ValidateObject: what only that subresource may change.
	ValidateSubresourceWrite(obj, old Object, subresource string) field.ErrorList
	// Claims lists the exclusive keys obj holds.
	ClaimsOf(obj Object) []string
	// Fields are the selectable fields of obj for field selectors.
	SelectableFields(obj Object) fields.Set
	// Columns and Row describe obj as a Table row.
	TableColumns() []metav1.TableColumnDefinition
	TableRow(obj Object) []any
	// StoredVersion is, for a resource served at a second version of its group, how its
	// objects convert to and from the version they are stored as; nil for every other.
	StoredVersion() Conversion
}

// RatchetingValidator is a Strategy whose update validation lets through some errors in
// values the update did not change and reports them as warnings instead, as Kubernetes does
// with CRD validation rules. Updates call it in place of ValidateObject.
type RatchetingValidator interface {
	ValidateUpdateWithWarnings(obj, old Object) (field.ErrorList, []string)
}

// Conversion turns the objects of a resource served at a second version into those of the
// version they are stored as, and back. Both versions' stores then share one etcd key per
// object: one object, one resourceVersion, one watch history, whichever version a client
// reads or writes it through (Kubernetes serves autoscaling/v1 HorizontalPodAutoscalers so).
type Conversion interface {
	// ToStored converts an object of the served version to the stored one.
	ToStored(obj Object) (Object, error)
	// FromStored converts a stored object to the served version.
	FromStored(stored Object) (Object, error)
}

// Convert makes the Conversion of a Def[T] whose objects are stored as S.
func Convert[S, T Object](toStored func(T) S, fromStored func(S) T) Conversion {
	return conversion[S, T]{to: toStored, from: fromStored}
}

type conversion[S, T Object] struct {
	to   func(T) S
	from func(S) T
}

func (c conversion[S, T]) ToStored(obj Object) (Object, error) {
	t, ok := obj.(T)
	if !ok {
		return nil, fmt.Errorf("converting %T: not a %T", obj, *new(T))
	}
	return c.to(t), nil
}

func (c conversion[S, T]) FromStored(stored Object) (Object, error) {
	s, ok := stored.(S)
	if !ok {
		return nil, fmt.Errorf("converting %T: not a %T", stored, *new(S))
	}
	return c.from(s), nil
}

// Def defines one resource over its k8s.io/api type T. Only Info, New and NewList are required.
type Def[T Object] struct {
	Info    Info
	NewList func() runtime.Object

	// NameValidation checks metadata.name; nil means a DNS-1123 subdomain, the common rule.
	NameValidation apimachineryvalidation.ValidateNameFunc
	// KeepStatusOnCreate keeps a status sent on create (nodes); otherwise it is reset.
	KeepStatusOnCreate bool
	// Defaults fills defaults, on create and on update.
	Defaults func(T)
	// Create adjusts a new object after defaults and admission, once it has its name and UID
	// (initial status, for example), as Kubernetes' strategies do in PrepareForCreate.
	Create func(T)
	// KeepOnUpdate restores what a write of the object itself may not change (beyond status),
	// such as a namespace's spec.finalizers, which only /finalize changes.
	KeepOnUpdate func(obj, old T)
	// Validate checks the object; ValidateCreate adds checks of new objects only,
	// ValidateUpdate checks of changes (immutable fields).
	Validate       func(T) field.ErrorList
	ValidateCreate func(T) field.ErrorList
	ValidateUpdate func(obj, old T) field.ErrorList
	// Allocate fills server-assigned values; old is the zero T on create.
	Allocate func(ctx context.Context, h Hooks, obj, old T, creating bool) field.ErrorList
	Claims   func(T) []string
	// Admit does what Kubernetes' mutating admission plugins do to writes of the object itself
	// (not of its subresources): fill in what depends on other objects, add finalizers, or
	// refuse the write with an error; old is the zero T on create. It runs before the
	// mutating admission policies and webhooks, which see what it did.
	Admit func(ctx context.Context, objs Objects, obj, old T) error
	// AdmitValidate does what Kubernetes' validating admission plugins check of writes of the
	// object itself, on the object as the webhooks left it; old is the zero T on create.
	AdmitValidate func(ctx context.Context, objs Objects, obj, old T) error
	// CreateFromRequest sets what a new object takes from its request (the CSR's requester),
	// after admission, as Kubernetes' strategies do in PrepareForCreate.
	CreateFromRequest func(ctx context.Context, obj T)
	// PrepareStatus adjusts a write of the status subresource, after the stored spec is kept.
	PrepareStatus func(obj, old T)
	// PrepareApproval adjusts a write of the approval subresource, after the stored spec is kept.
	PrepareApproval func(obj, old T)
	// ValidateSubresource adds checks of writes through a subresource (status, approval).
	ValidateSubresource func(obj, old T, subresource string) field.ErrorList
	// Fields adds selectable fields beyond metadata.name and metadata.namespace.
	Fields func(T) fields.Set
	// Columns follow the NAME column; Row gives the matching cells (without the name).
	Columns []metav1.TableColumnDefinition
	Row     func(T) []any
	// SpecChanged, for a type without a spec, reports whether an update changes what its
	// metadata.generation counts; such types start at generation 1 like those with a spec.
	SpecChanged func(obj, old T) bool
	// NameLast moves the NAME column to the end, shown only with -o wide (events).
	NameLast bool
	// NameCell, if set, renders the NAME cell (a default StorageClass shows "(default)").
	NameCell func(T) string
	// NoGeneration leaves metadata.generation unset, for the types with a spec that
	// Kubernetes does not count (ServiceCIDRs, CSIDrivers, ResourceClaims and others).
	NoGeneration bool
	// StoredAs, for a resource served at a second version, converts its objects to and from
	// the version they are stored as (see Conversion).
	StoredAs Conversion
}

// StoredVersion implements Strategy.
func (d *Def[T]) StoredVersion() Conversion { return d.StoredAs }

// Describe implements Strategy.
func (d *Def[T]) Describe() *Info { return &d.Info }

// NewObject implements Strategy.
func (d *Def[T]) NewObject() Object {
	var zero T
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
}

// NewListObject implements Strategy.
func (d *Def[T]) NewListObject() runtime.Object { return d.NewList() }

// PrepareCreate implements Strategy.
func (d *Def[T]) PrepareCreate(o Object) {
	d.PrepareForAdmission(o)
	if d.Create != nil {
		d.Create(o.(T))
	}
}

// PrepareForAdmission implements Strategy.
func (d *Def[T]) PrepareForAdmission(o Object) {
	obj := o.(T)
	if d.Info.Status && !d.KeepStatusOnCreate {
		resetField(obj, "Status")
	}
	if (hasField(obj, "Spec") || d.SpecChanged != nil) && !d.NoGeneration {
		obj.SetGeneration(1)
	}
	if d.Defaults != nil {
		d.Defaults(obj)
	}
}

// PrepareUpdate implements Strategy.
func (d *Def[T]) PrepareUpdate(o, oldo Object, subresource string) {
	obj, old := o.(T), oldo.(T)
	// An approval write is a status write of its own: it too keeps the stored spec.
	status := subresource == "status" || subresource == "approval" && d.Info.Approval
	if subresource == "" && d.KeepOnUpdate != nil {
		d.KeepOnUpdate(obj, old)
	}
	if d.Info.Status {
		if status {
			copyField(obj, old, "Spec")
		} else {
			copyField(obj, old, "Status")
		}
	}
	switch {
	case subresource == "status" && d.PrepareStatus != nil:
		d.PrepareStatus(obj, old)
	case subresource == "approval" && d.PrepareApproval != nil:
		d.PrepareApproval(obj, old)
	}
	obj.SetGeneration(old.GetGeneration())
	if d.Defaults != nil {
		d.Defaults(obj)
	}
	switch {
	case status, d.NoGeneration:
	case d.SpecChanged != nil && d.SpecChanged(obj, old):
		obj.SetGeneration(old.GetGeneration() + 1)
	case hasField(obj, "Spec") && !apiequality.Semantic.DeepEqual(fieldOf(obj, "Spec"), fieldOf(old, "Spec")):
		obj.SetGeneration(old.GetGeneration() + 1)
	}
}

// AllocateFor implements Strategy.
func (d *Def[T]) AllocateFor(ctx context.Context, h Hooks, o, oldo Object) field.ErrorList {
	if d.Allocate == nil {
		return nil
	}
	var old T
	if oldo != nil {
		old = oldo.(T)
	}
	return d.Allocate(ctx, h, o.(T), old, oldo == nil)
}

// AdmitFor implements Strategy.
func (d *Def[T]) AdmitFor(ctx context.Context, objs Objects, o, oldo Object, subresource string) error {
	return admitWith(d.Admit, ctx, objs, o, oldo, subresource)
}

// ValidateAdmissionFor implements Strategy.
func (d *Def[T]) ValidateAdmissionFor(ctx context.Context, objs Objects, o, oldo Object, subresource string) error {
	return admitWith(d.AdmitValidate, ctx, objs, o, oldo, subresource)
}

// admitWith calls an admission hook (Admit, AdmitValidate) on a write of the object itself,
// old as the zero T on create; writes of subresources are not its to judge.
func admitWith[T Object](hook func(context.Context, Objects, T, T) error, ctx context.Context, objs Objects, o, oldo Object, subresource string) error {
	if hook == nil || subresource != "" {
		return nil
	}
	var old T
	if oldo != nil {
		old = oldo.(T)
	}
	return hook(ctx, objs, o.(T), old)
}

// PrepareCreateFromRequest implements Strategy.
func (d *Def[T]) PrepareCreateFromRequest(ctx context.Context, o Object) {
	if d.CreateFromRequest != nil {
		d.CreateFromRequest(ctx, o.(T))
	}
}

// ValidateObject implements Strategy.
func (d *Def[T]) ValidateObject(o, oldo Object) field.ErrorList {
	obj := o.(T)
	nameFn := d.NameValidation
	if nameFn == nil {
		nameFn = apimachineryvalidation.NameIsDNSSubdomain
	}
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(obj, d.Info.Namespaced, nameFn, field.NewPath("metadata"))
	if oldo != nil {
		old := oldo.(T)
		errs = append(errs, apimachineryvalidation.ValidateObjectMetaAccessorUpdate(obj, old, field.NewPath("metadata"))...)
		if d.ValidateUpdate != nil {
			errs = append(errs, d.ValidateUpdate(obj, old)...)
		}
	} else if d.ValidateCreate != nil {
		errs = append(errs, d.ValidateCreate(obj)...)
	}
	if d.Validate != nil {
		errs = append(errs, d.Validate(obj)...)
	}
	return errs
}

// ValidateSubresourceWrite implements Strategy.
func (d *Def[T]) ValidateSubresourceWrite(o, oldo Object, subresource string) field.ErrorList {
	if d.ValidateSubresource == nil {
		return nil
	}
	return d.ValidateSubresource(o.(T), oldo.(T), subresource)
}

// ClaimsOf implements Strategy.
func (d *Def[T]) ClaimsOf(o Object) []string {
	if d.Claims == nil {
		return nil
	}
	return d.Claims(o.(T))
}

// SelectableFields implements Strategy.
func (d *Def[T]) SelectableFields(o Object) fields.Set {
	set := fields.Set{"metadata.name": o.GetName()}
	if d.Info.Namespaced {
		set["metadata.namespace"] = o.GetNamespace()
	}
	if d.Fields != nil {
		for k, v := range d.Fields(o.(T)) {
			set[k] = v
		}
	}
	return set
}

// TableColumns implements Strategy.
func (d *Def[T]) TableColumns() []metav1.TableColumnDefinition {
	name := metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."}
	rest := d.Columns
	if d.Row == nil {
		rest = []metav1.TableColumnDefinition{AgeColumn}
	}
	if d.NameLast {
		name.Priority = 1
		return append(append([]metav1.TableColumnDefinition{}, rest...), name)
	}
	return append([]metav1.TableColumnDefinition{name}, rest...)
}

// TableRow implements Strategy.
func (d *Def[T]) TableRow(o Object) []any {
	var rest []any
	if d.Row == nil {
		rest = []any{Age(o.GetCreationTimestamp())}
	} else {
		rest = d.Row(o.(T))
	}
	name := o.GetName()
	if d.NameCell != nil {
		name = d.NameCell(o.(T))
	}
	if d.NameLast {
		return append(rest, name)
	}
	return append([]any{name}, rest...)
}

func fieldOf(obj any, name string) any {
	v := reflect.ValueOf(obj).Elem().FieldByName(name)
	if !v.IsValid() {
		return nil
	}
	return v.Interface()
}

func hasField(obj any, name string) bool {
	return reflect.ValueOf(obj).Elem().FieldByName(name).IsValid()
}

func resetField(obj any, name string) {
	v := reflect.ValueOf(obj).Elem().FieldByName(name)
	if v.IsValid() {
		v.Set(reflect.Zero(v.Type()))
	}
}

func copyField(dst, src any, name string) {
	d := reflect.ValueOf(dst).Elem().FieldByName(name)
	if d.IsValid() {
		d.Set(reflect.ValueOf(src).Elem().FieldByName(name))
	}
}
