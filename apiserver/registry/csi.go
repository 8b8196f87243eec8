package registry

import (
	"fmt"
	"math"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// storage.k8s.io beyond StorageClasses: what CSI drivers register and report (CSIDrivers,
// CSINodes, CSIStorageCapacities), the attach requests of volumes (VolumeAttachments) and
// VolumeAttributesClasses. kplane's node agent mounts hostPath and local volumes itself and
// runs no CSI driver, so no kplane component reads or writes these; they are stored and
// validated for the drivers and tools that do.

func storageExtraResources() []Strategy {
	return []Strategy{csiDrivers, csiNodes, csiStorageCapacities, volumeAttachments, volumeAttributesClasses}
}

// Limits of the CSI objects' fields.
const (
	maxCSIDriverName         = 63
	maxCSINodeID             = 256
	maxAttachmentMetadata    = 256 << 10
	maxVolumeErrorMessage    = 1024
	minCSITokenExpiration    = 10 * 60
	maxCSITokenExpiration    = 1 << 32
	minAllocatableUpdateSecs = 10
)

var csiDrivers = &Def[*storagev1.CSIDriver]{
	Info:         Info{GroupVersion: storageV1, Resource: "csidrivers", Singular: "csidriver", Kind: "CSIDriver"},
	NewList:      func() runtime.Object { return &storagev1.CSIDriverList{} },
	NoGeneration: true,
	Defaults:     defaultCSIDriver,
	Validate:     validateCSIDriver,
	ValidateUpdate: func(d, old *storagev1.CSIDriver) field.ErrorList {
		var errs field.ErrorList
		// Kubernetes names this path with a typo; clients that match on causes see the same.
		if deref(d.Spec.AttachRequired) != deref(old.Spec.AttachRequired) {
			errs = append(errs, immutable(d.Spec.AttachRequired, field.NewPath("spec", "attachedRequired"))...)
		}
		if !apiequality.Semantic.DeepEqual(d.Spec.VolumeLifecycleModes, old.Spec.VolumeLifecycleModes) {
			errs = append(errs, immutable(d.Spec.VolumeLifecycleModes, field.NewPath("spec", "volumeLifecycleModes"))...)
		}
		return errs
	},
	Columns: columns(
		Column("AttachRequired", "boolean", 0, "Whether volumes of the driver are attached before they are mounted."),
		Column("PodInfoOnMount", "boolean", 0, "Whether the driver gets the pod's details on mount."),
		Column("StorageCapacity", "boolean", 0, "Whether scheduling considers the capacity the driver reports."),
		Column("TokenRequests", "string", 0, "The audiences of the service account tokens the driver gets."),
		Column("RequiresRepublish", "boolean", 0, "Whether mounts are published again periodically."),
		Column("Modes", "string", 0, "The kinds of volumes the driver supports."),
		AgeColumn,
	),
	Row: func(d *storagev1.CSIDriver) []any {
		s := &d.Spec
		tokens := "<unset>"
		if len(s.TokenRequests) > 0 {
			auds := make([]string, len(s.TokenRequests))
			for i, t := range s.TokenRequests {
				auds[i] = t.Audience
			}
			tokens = strings.Join(auds, ",")
		}
		modes := make([]string, len(s.VolumeLifecycleModes))
		for i, m := range s.VolumeLifecycleModes {
			modes[i] = string(m)
		}
		return []any{deref(s.AttachRequired), deref(s.PodInfoOnMount), deref(s.StorageCapacity), tokens,
			deref(s.RequiresRepublish), strings.Join(modes, ","), Age(d.CreationTimestamp)}
	},
}

func defaultCSIDriver(d *storagev1.CSIDriver) {
	s := &d.Spec
	def := func(b **bool, v bool) {
		if *b == nil {
			*b = new(v)
		}
	}
	def(&s.AttachRequired, true)
	def(&s.PodInfoOnMount, false)
	def(&s.StorageCapacity, false)
	def(&s.RequiresRepublish, false)
	def(&s.SELinuxMount, false)
	if s.FSGroupPolicy == nil {
		s.FSGroupPolicy = new(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)
	}
	if len(s.VolumeLifecycleModes) == 0 {
		s.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
}

func validateCSIDriver(d *storagev1.CSIDriver) field.ErrorList {
	sp := field.NewPath("spec")
	s := &d.Spec
	var errs field.ErrorList
	required := func(set bool, name string) {
		if !set {
			errs = append(errs, field.Required(sp.Child(name), ""))
		}
	}
	required(s.AttachRequired != nil, "attachedRequired")
	required(s.PodInfoOnMount != nil, "podInfoOnMount")
	required(s.StorageCapacity != nil, "storageCapacity")
	required(s.SELinuxMount != nil, "seLinuxMount")
	if s.FSGroupPolicy != nil {
		errs = append(errs, oneOf(*s.FSGroupPolicy, sp.Child("fsGroupPolicy"), storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy,
			storagev1.FileFSGroupPolicy, storagev1.NoneFSGroupPolicy)...)
	}
	audiences := map[string]bool{}
	for i, t := range s.TokenRequests {
		tp := sp.Child("tokenRequests").Index(i)
		if audiences[t.Audience] {
			errs = append(errs, field.Duplicate(tp.Child("audience"), t.Audience))
			continue
		}
		audiences[t.Audience] = true
		if e := t.ExpirationSeconds; e != nil {
			if *e < minCSITokenExpiration {
				errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *e, "may not specify a duration less than 10 minutes"))
			}
			if *e > maxCSITokenExpiration {
				errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *e, "may not specify a duration larger than 2^32 seconds"))
			}
		}
	}
	for _, m := range s.VolumeLifecycleModes {
		if m != storagev1.VolumeLifecyclePersistent && m != storagev1.VolumeLifecycleEphemeral {
			errs = append(errs, field.NotSupported(sp.Child("volumeLifecycleModes"), m,
				[]storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}))
		}
	}
	if p := s.NodeAllocatableUpdatePeriodSeconds; p != nil && *p < minAllocatableUpdateSecs {
		errs = append(errs, field.Invalid(sp.Child("nodeAllocatableUpdatePeriodSeconds"), *p, "must be greater than or equal to 10 seconds"))
	}
	if s.ServiceAccountTokenInSecrets != nil && len(s.TokenRequests) == 0 {
		errs = append(errs, field.Invalid(sp.Child("serviceAccountTokenInSecrets"), s.ServiceAccountTokenInSecrets,
			"serviceAccountTokenInSecrets is set but no tokenRequests are specified"))
	}
	return errs
}

// csiDriverName: present, at most 63 characters, a DNS subdomain in any case.
func csiDriverName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	if len(name) > maxCSIDriverName {
		errs = append(errs, field.TooLong(p, "", maxCSIDriverName))
	}
	return append(errs, msgs(p, name, validation.IsDNS1123Subdomain(strings.ToLower(name)))...)
}

var csiNodes = &Def[*storagev1.CSINode]{
	Info:         Info{GroupVersion: storageV1, Resource: "csinodes", Singular: "csinode", Kind: "CSINode"},
	NewList:      func() runtime.Object { return &storagev1.CSINodeList{} },
	NoGeneration: true,
	Validate:     validateCSINode,
	ValidateUpdate: func(n, old *storagev1.CSINode) field.ErrorList {
		// A registered driver stays as it registered, but for its allocatable count.
		var errs field.ErrorList
		for _, was := range old.Spec.Drivers {
			for _, now := range n.Spec.Drivers {
				if was.Name != now.Name {
					continue
				}
				was.Allocatable, now.Allocatable = nil, nil
				if !apiequality.Semantic.DeepEqual(was, now) {
					errs = append(errs, immutable(now, field.NewPath("spec", "drivers"))...)
				}
			}
		}
		return errs
	},
	Columns: columns(Column("Drivers", "integer", 0, "The number of CSI drivers registered on the node."), AgeColumn),
	Row: func(n *storagev1.CSINode) []any {
		return []any{int64(len(n.Spec.Drivers)), Age(n.CreationTimestamp)}
	},
}

func validateCSINode(n *storagev1.CSINode) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, d := range n.Spec.Drivers {
		dp := field.NewPath("spec", "drivers").Index(i)
		errs = append(errs, csiDriverName(d.Name, dp.Child("name"))...)
		if d.NodeID == "" {
			errs = append(errs, field.Required(dp.Child("nodeID"), ""))
		}
		if len(d.NodeID) > maxCSINodeID {
			errs = append(errs, field.Invalid(dp.Child("nodeID"), d.NodeID, fmt.Sprintf("must be %d characters or less", maxCSINodeID)))
		}
		if a := d.Allocatable; a != nil && a.Count != nil {
			errs = append(errs, nonNegative(*a.Count, dp.Child("allocatable", "count"))...)
		}
		errs = append(errs, unique(names, d.Name, dp.Child("name"), d.Name)...)
		keys := map[string]bool{}
		for _, k := range d.TopologyKeys {
			if k == "" {
				errs = append(errs, field.Required(dp, ""))
			}
			errs = append(errs, unique(keys, k, dp, k)...)
			errs = append(errs, msgs(dp, k, validation.IsQualifiedName(k))...)
		}
	}
	return errs
}

var csiStorageCapacities = &Def[*storagev1.CSIStorageCapacity]{
	Info: Info{GroupVersion: storageV1, Resource: "csistoragecapacities", Singular: "csistoragecapacity", Kind: "CSIStorageCapacity",
		Namespaced: true},
	NewList: func() runtime.Object { return &storagev1.CSIStorageCapacityList{} },
	Validate: func(c *storagev1.CSIStorageCapacity) field.ErrorList {
		errs := metav1validation.ValidateLabelSelector(c.NodeTopology, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("nodeTopology"))
		errs = append(errs, dnsSubdomain(c.StorageClassName, field.NewPath("storageClassName"))...)
		if c.Capacity != nil {
			errs = append(errs, nonNegativeQty(*c.Capacity, field.NewPath("capacity"))...)
		}
		return errs
	},
	ValidateUpdate: func(c, old *storagev1.CSIStorageCapacity) field.ErrorList {
		var errs field.ErrorList
		if !apiequality.Semantic.DeepEqual(c.NodeTopology, old.NodeTopology) {
			errs = append(errs, immutable(c.NodeTopology, field.NewPath("nodeTopology"))...)
		}
		if c.StorageClassName != old.StorageClassName {
			errs = append(errs, immutable(c.StorageClassName, field.NewPath("storageClassName"))...)
		}
		return errs
	},
	// Kubernetes has no printer for this kind: its table is the generic one, with the creation
	// time as a date rather than an age.
	Columns: columns(metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: "The time the object was created."}),
	Row: func(c *storagev1.CSIStorageCapacity) []any {
		return []any{c.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z")}
	},
}

var volumeAttachments = &Def[*storagev1.VolumeAttachment]{
	Info: Info{GroupVersion: storageV1, Resource: "volumeattachments", Singular: "volumeattachment", Kind: "VolumeAttachment",
		Status: true},
	NewList:      func() runtime.Object { return &storagev1.VolumeAttachmentList{} },
	NoGeneration: true,
	Validate:     validateVolumeAttachment,
	ValidateUpdate: func(a, old *storagev1.VolumeAttachment) field.ErrorList {
		if !apiequality.Semantic.DeepEqual(a.Spec, old.Spec) {
			return immutable(a.Spec, field.NewPath("spec"))
		}
		return nil
	},
	Columns: columns(
		metav1.TableColumnDefinition{Name: "Attacher", Type: "string", Format: "name", Description: "The volume driver that attaches the volume."},
		Column("PV", "string", 0, "The persistent volume to attach."),
		Column("Node", "string", 0, "The node to attach the volume to."),
		Column("Attached", "boolean", 0, "Whether the volume is attached."),
		AgeColumn,
	),
	Row: func(a *storagev1.VolumeAttachment) []any {
		return []any{a.Spec.Attacher, deref(a.Spec.Source.PersistentVolumeName), a.Spec.NodeName, a.Status.Attached, Age(a.CreationTimestamp)}
	},
}

func validateVolumeAttachment(a *storagev1.VolumeAttachment) field.ErrorList {
	sp := field.NewPath("spec")
	errs := csiDriverName(a.Spec.Attacher, sp.Child("attacher"))
	src, srcPath := a.Spec.Source, sp.Child("source")
	switch {
	case src.InlineVolumeSpec == nil && src.PersistentVolumeName == nil:
		errs = append(errs, field.Required(srcPath, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case src.InlineVolumeSpec != nil && src.PersistentVolumeName != nil:
		errs = append(errs, field.Forbidden(srcPath, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case src.PersistentVolumeName != nil:
		if *src.PersistentVolumeName == "" {
			errs = append(errs, field.Required(srcPath.Child("persistentVolumeName"), "must specify non empty persistentVolumeName"))
		} else {
			errs = append(errs, dnsSubdomain(*src.PersistentVolumeName, field.NewPath("spec.source.persistentVolumeName"))...)
		}
	default:
		errs = append(errs, validateVolumeSource(&src.InlineVolumeSpec.PersistentVolumeSource, srcPath.Child("inlineVolumeSpec"))...)
	}
	errs = append(errs, dnsSubdomain(a.Spec.NodeName, sp.Child("nodeName"))...)
	st := field.NewPath("status")
	size := 0
	for k, v := range a.Status.AttachmentMetadata {
		size += len(k) + len(v)
	}
	if size > maxAttachmentMetadata {
		errs = append(errs, field.TooLong(st.Child("attachmentMetadata"), "", maxAttachmentMetadata))
	}
	for name, e := range map[string]*storagev1.VolumeError{"attachError": a.Status.AttachError, "detachError": a.Status.DetachError} {
		if e == nil {
			continue
		}
		if len(e.Message) > maxVolumeErrorMessage {
			errs = append(errs, field.TooLong(st.Child(name, "message"), "", maxVolumeErrorMessage))
		}
		if c := e.ErrorCode; c != nil && *c < 0 {
			errs = append(errs, field.Invalid(st.Child(name, "errorCode"), *c, validation.InclusiveRangeError(0, math.MaxInt32)))
		}
	}
	return errs
}

var volumeAttributesClasses = &Def[*storagev1.VolumeAttributesClass]{
	Info: Info{GroupVersion: storageV1, Resource: "volumeattributesclasses", Singular: "volumeattributesclass", Kind: "VolumeAttributesClass",
		ShortNames: []string{"vac"}},
	NewList: func() runtime.Object { return &storagev1.VolumeAttributesClassList{} },
	Validate: func(c *storagev1.VolumeAttributesClass) field.ErrorList {
		errs := validateProvisioner(c.DriverName, field.NewPath("driverName"))
		errs = append(errs, validateClassParameters(c.Parameters, field.NewPath("parameters"))...)
		if len(c.Parameters) == 0 {
			errs = append(errs, field.Required(field.NewPath("parameters"), "must contain at least one key/value pair"))
		}
		return errs
	},
	ValidateUpdate: func(c, old *storagev1.VolumeAttributesClass) field.ErrorList {
		var errs field.ErrorList
		if c.DriverName != old.DriverName {
			errs = append(errs, field.Forbidden(field.NewPath("driverName"), "updates to driverName are forbidden."))
		}
		if !apiequality.Semantic.DeepEqual(c.Parameters, old.Parameters) {
			errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
		}
		return errs
	},
	Columns: columns(Column("DriverName", "string", 0, "The CSI driver the class is for."), AgeColumn),
	Row: func(c *storagev1.VolumeAttributesClass) []any {
		return []any{c.DriverName, Age(c.CreationTimestamp)}
	},
}
