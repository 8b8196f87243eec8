package registry

import (
	"context"
	"path"
	"slices"
	"strings"

	"github.com/kplane/kplane/internal/pv"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Persistent storage: core/v1 PersistentVolumes and PersistentVolumeClaims, and storage.k8s.io/v1
// StorageClasses, with the admission Kubernetes applies to them (DefaultStorageClass,
// StorageObjectInUseProtection, PersistentVolumeClaimResize).

var storageV1 = storagev1.SchemeGroupVersion

var storageClassesResource = schema.GroupResource{Group: storagev1.GroupName, Resource: "storageclasses"}

var persistentVolumes = &Def[*corev1.PersistentVolume]{
	Info: Info{GroupVersion: coreV1, Resource: "persistentvolumes", Singular: "persistentvolume", Kind: "PersistentVolume",
		ShortNames: []string{"pv"}, Status: true},
	NewList:  func() runtime.Object { return &corev1.PersistentVolumeList{} },
	Defaults: defaultPersistentVolume,
	Create: func(v *corev1.PersistentVolume) {
		v.Status.LastPhaseTransitionTime = new(metav1.Now())
	},
	Admit: func(_ context.Context, _ Objects, v, old *corev1.PersistentVolume) error {
		if old == nil {
			addFinalizer(v, pv.PVProtectionFinalizer)
		}
		return nil
	},
	PrepareStatus: func(v, old *corev1.PersistentVolume) {
		// The phase's transition time follows the phase unless the writer set a new one.
		switch t := v.Status.LastPhaseTransitionTime; {
		case v.Status.Phase == old.Status.Phase && t == nil:
			v.Status.LastPhaseTransitionTime = old.Status.LastPhaseTransitionTime
		case v.Status.Phase != old.Status.Phase && (t == nil || t.Equal(old.Status.LastPhaseTransitionTime)):
			v.Status.LastPhaseTransitionTime = new(metav1.Now())
		}
	},
	Validate:       validatePersistentVolume,
	ValidateUpdate: validatePersistentVolumeUpdate,
	// "name" is a historical alias Kubernetes still accepts.
	Fields: func(v *corev1.PersistentVolume) fields.Set { return fields.Set{"name": v.Name} },
	Columns: columns(
		Column("Capacity", "string", 0, "The storage the volume offers."),
		Column("Access Modes", "string", 0, "The ways the volume can be mounted."),
		Column("Reclaim Policy", "string", 0, "What happens to the volume when its claim is released."),
		Column("Status", "string", 0, "The phase of the volume."),
		Column("Claim", "string", 0, "The claim bound to the volume."),
		Column("StorageClass", "string", 0, "StorageClass of the pv"),
		Column("VolumeAttributesClass", "string", 0, "VolumeAttributesClass of the pv"),
		Column("Reason", "string", 0, "Why the volume is in its phase, when it failed."),
		AgeColumn,
		Column("VolumeMode", "string", 1, "Whether the volume is a filesystem or a raw block device."),
	),
	Row: persistentVolumeRow,
}

var persistentVolumeClaims = &Def[*corev1.PersistentVolumeClaim]{
	Info: Info{GroupVersion: coreV1, Resource: "persistentvolumeclaims", Singular: "persistentvolumeclaim", Kind: "PersistentVolumeClaim",
		ShortNames: []string{"pvc"}, Namespaced: true, Status: true},
	NewList:        func() runtime.Object { return &corev1.PersistentVolumeClaimList{} },
	Defaults:       defaultPersistentVolumeClaim,
	Admit:          admitPersistentVolumeClaim,
	AdmitValidate:  checkClaimExpansion,
	Validate:       validatePersistentVolumeClaim,
	ValidateUpdate: validatePersistentVolumeClaimUpdate,
	Fields:         func(c *corev1.PersistentVolumeClaim) fields.Set { return fields.Set{"name": c.Name} },
	Columns: columns(
		Column("Status", "string", 0, "The phase of the claim."),
		Column("Volume", "string", 0, "The volume bound to the claim."),
		Column("Capacity", "string", 0, "The storage the bound volume offers."),
		Column("Access Modes", "string", 0, "The ways the bound volume can be mounted."),
		Column("StorageClass", "string", 0, "StorageClass of the pvc"),
		Column("VolumeAttributesClass", "string", 0, "VolumeAttributesClass of the pvc"),
		AgeColumn,
		Column("VolumeMode", "string", 1, "Whether the claim asks for a filesystem or a raw block device."),
	),
	Row: persistentVolumeClaimRow,
}

var storageClasses = &Def[*storagev1.StorageClass]{
	Info: Info{GroupVersion: storageV1, Resource: "storageclasses", Singular: "storageclass", Kind: "StorageClass",
		ShortNames: []string{"sc"}},
	NewList: func() runtime.Object { return &storagev1.StorageClassList{} },
	Defaults: func(sc *storagev1.StorageClass) {
		if sc.ReclaimPolicy == nil {
			sc.ReclaimPolicy = new(corev1.PersistentVolumeReclaimDelete)
		}
		if sc.VolumeBindingMode == nil {
			sc.VolumeBindingMode = new(storagev1.VolumeBindingImmediate)
		}
	},
	Validate: validateStorageClass,
	ValidateUpdate: func(sc, old *storagev1.StorageClass) field.ErrorList {
		var errs field.ErrorList
		for _, f := range []struct {
			name     string
			now, was any
		}{
			{"parameters", sc.Parameters, old.Parameters},
			{"provisioner", sc.Provisioner, old.Provisioner},
			{"reclaimPolicy", sc.ReclaimPolicy, old.ReclaimPolicy},
			{"volumeBindingMode", sc.VolumeBindingMode, old.VolumeBindingMode},
		} {
			if !apiequality.Semantic.DeepEqual(f.now, f.was) {
				errs = append(errs, immutable(f.now, field.NewPath(f.name))...)
			}
		}
		return errs
	},
	// A StorageClass has no spec; what matters to its users lives at the top level.
	SpecChanged: func(sc, old *storagev1.StorageClass) bool {
		return !apiequality.Semantic.DeepEqual(sc.AllowVolumeExpansion, old.AllowVolumeExpansion) ||
			!apiequality.Semantic.DeepEqual(sc.MountOptions, old.MountOptions) ||
			!apiequality.Semantic.DeepEqual(sc.AllowedTopologies, old.AllowedTopologies)
	},
	NameCell: func(sc *storagev1.StorageClass) string {
		if pv.IsDefaultClass(sc) {
			return sc.Name + " (default)"
		}
		return sc.Name
	},
	Columns: columns(
		Column("Provisioner", "string", 0, "The provisioner that creates volumes of this class."),
		Column("ReclaimPolicy", "string", 0, "The reclaim policy of the volumes this class provisions."),
		Column("VolumeBindingMode", "string", 0, "When claims of this class are bound and provisioned."),
		Column("AllowVolumeExpansion", "string", 0, "Whether claims of this class may grow."),
		AgeColumn,
	),
	Row: func(sc *storagev1.StorageClass) []any {
		return []any{sc.Provisioner, string(or(deref(sc.ReclaimPolicy), corev1.PersistentVolumeReclaimDelete)),
			string(or(deref(sc.VolumeBindingMode), storagev1.VolumeBindingImmediate)), deref(sc.AllowVolumeExpansion), Age(sc.CreationTimestamp)}
	},
}

func addFinalizer(o metav1.Object, f string) {
	if !slices.Contains(o.GetFinalizers(), f) {
		o.SetFinalizers(append(o.GetFinalizers(), f))
	}
}

func defaultPersistentVolume(v *corev1.PersistentVolume) {
	v.Status.Phase = or(v.Status.Phase, corev1.VolumePending)
	v.Spec.PersistentVolumeReclaimPolicy = or(v.Spec.PersistentVolumeReclaimPolicy, corev1.PersistentVolumeReclaimRetain)
	if v.Spec.VolumeMode == nil {
		v.Spec.VolumeMode = new(corev1.PersistentVolumeFilesystem)
	}
	if h := v.Spec.HostPath; h != nil && h.Type == nil {
		h.Type = new(corev1.HostPathUnset)
	}
}

func defaultPersistentVolumeClaim(c *corev1.PersistentVolumeClaim) {
	c.Status.Phase = or(c.Status.Phase, corev1.ClaimPending)
	if c.Spec.VolumeMode == nil {
		c.Spec.VolumeMode = new(corev1.PersistentVolumeFilesystem)
	}
	// dataSource and dataSourceRef say the same thing; a client that sets one gets both.
	s := &c.Spec
	switch {
	case s.DataSource != nil && s.DataSourceRef == nil:
		s.DataSourceRef = &corev1.TypedObjectReference{APIGroup: s.DataSource.APIGroup, Kind: s.DataSource.Kind, Name: s.DataSource.Name}
	case s.DataSourceRef != nil && s.DataSource == nil && deref(s.DataSourceRef.Namespace) == "":
		s.DataSource = &corev1.TypedLocalObjectReference{APIGroup: s.DataSourceRef.APIGroup, Kind: s.DataSourceRef.Kind, Name: s.DataSourceRef.Name}
	}
}

// admitPersistentVolumeClaim does what Kubernetes' DefaultStorageClass and
// StorageObjectInUseProtection plugins do to a new claim.
func admitPersistentVolumeClaim(ctx context.Context, objs Objects, c, old *corev1.PersistentVolumeClaim) error {
	if old != nil {
		return nil
	}
	addFinalizer(c, pv.PVCProtectionFinalizer)
	if pv.ClaimHasClass(c) {
		return nil
	}
	stored, err := objs.List(ctx, storageClassesResource)
	if err != nil {
		return claimForbidden(c, err)
	}
	classes := make([]*storagev1.StorageClass, 0, len(stored))
	for _, o := range stored {
		classes = append(classes, o.(*storagev1.StorageClass))
	}
	if def := pv.DefaultClass(classes); def != nil {
		c.Spec.StorageClassName = new(def.Name)
	}
	return nil
}

// checkClaimExpansion is Kubernetes' PersistentVolumeClaimResize validation: a claim grows
// only when it is bound and its class allows expansion.
func checkClaimExpansion(ctx context.Context, objs Objects, c, old *corev1.PersistentVolumeClaim) error {
	if old == nil {
		return nil
	}
	size, oldSize := c.Spec.Resources.Requests[corev1.ResourceStorage], old.Spec.Resources.Requests[corev1.ResourceStorage]
	if size.Cmp(oldSize) <= 0 {
		return nil
	}
	if old.Status.Phase != corev1.ClaimBound {
		return claimForbidden(c, message("Only bound persistent volume claims can be expanded"))
	}
	class := pv.ClaimClass(c)
	allowed := false
	if class != "" && class == pv.ClaimClass(old) {
		if o, err := objs.Get(ctx, storageClassesResource, "", class); err == nil {
			allowed = deref(o.(*storagev1.StorageClass).AllowVolumeExpansion)
		}
	}
	if !allowed {
		return claimForbidden(c, message("only dynamically provisioned pvc can be resized and "+
			"the storageclass that provisions the pvc must support resize"))
	}
	return nil
}

func claimForbidden(c *corev1.PersistentVolumeClaim, err error) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, c.Name, err)
}

// message is an error that is only its text: Kubernetes' words, capital letters included.
type message string

func (m message) Error() string { return string(m) }

var (
	accessModes       = []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOnce, corev1.ReadWriteOncePod}
	volumeModes       = []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem}
	pvReclaimPolicies = []corev1.PersistentVolumeReclaimPolicy{corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRecycle, corev1.PersistentVolumeReclaimRetain}
	hostPathTypes     = []corev1.HostPathType{corev1.HostPathUnset, corev1.HostPathBlockDev, corev1.HostPathCharDev, corev1.HostPathDirectory,
		corev1.HostPathDirectoryOrCreate, corev1.HostPathFile, corev1.HostPathFileOrCreate, corev1.HostPathSocket}
)

// validateAccessModes checks the access modes of a volume or claim: at least one, each known,
// and ReadWriteOncePod alone.
func validateAccessModes(modes []corev1.PersistentVolumeAccessMode, required string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(modes) == 0 {
		errs = append(errs, field.Required(p, required))
	}
	once, other := false, false
	for _, m := range modes {
		switch {
		case !slices.Contains(accessModes, m):
			errs = append(errs, field.NotSupported(p, m, accessModes))
		case m == corev1.ReadWriteOncePod:
			once = true
		default:
			other = true
		}
	}
	if once && other {
		errs = append(errs, field.Forbidden(p, "may not use ReadWriteOncePod with other access modes"))
	}
	return errs
}

func positiveQuantity(q resource.Quantity, p *field.Path) field.ErrorList {
	if q.Cmp(resource.Quantity{}) <= 0 {
		return field.ErrorList{field.Invalid(p, q.String(), "must be greater than zero")}
	}
	return nil
}

// noBacksteps refuses a path with a ".." element: it could escape what the volume grants.
func noBacksteps(v string, p *field.Path) field.ErrorList {
	if slices.Contains(strings.Split(v, "/"), "..") {
		return field.ErrorList{field.Invalid(p, v, "must not contain '..'")}
	}
	return nil
}

func className(v string, p *field.Path) field.ErrorList {
	return msgs(p, v, validation.IsDNS1123Subdomain(v))
}

func validatePersistentVolume(v *corev1.PersistentVolume) field.ErrorList {
	sp := field.NewPath("spec")
	s := &v.Spec
	errs := validateAccessModes(s.AccessModes, "", sp.Child("accessModes"))
	cp := sp.Child("capacity")
	if len(s.Capacity) == 0 {
		errs = append(errs, field.Required(cp, ""))
	}
	if _, ok := s.Capacity[corev1.ResourceStorage]; !ok || len(s.Capacity) > 1 {
		errs = append(errs, field.NotSupported(cp, s.Capacity, []corev1.ResourceName{corev1.ResourceStorage}))
	}
	for name, q := range s.Capacity {
		errs = append(errs, positiveQuantity(q, cp.Key(string(name)))...)
	}
	if s.PersistentVolumeReclaimPolicy != "" {
		errs = append(errs, oneOf(s.PersistentVolumeReclaimPolicy, sp.Child("persistentVolumeReclaimPolicy"), pvReclaimPolicies...)...)
	}
	if s.NodeAffinity != nil {
		ap := sp.Child("nodeAffinity")
		if s.NodeAffinity.Required == nil {
			errs = append(errs, field.Required(ap.Child("required"), "must specify required node constraints"))
		} else {
			errs = append(errs, validateNodeSelector(s.NodeAffinity.Required, ap.Child("required"))...)
		}
	}
	errs = append(errs, validateVolumeSource(&s.PersistentVolumeSource, sp)...)
	if s.Local != nil && s.NodeAffinity == nil {
		errs = append(errs, field.Required(sp.Child("nodeAffinity"), "Local volume requires node affinity"))
	}
	if s.HostPath != nil && path.Clean(s.HostPath.Path) == "/" && s.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRecycle {
		errs = append(errs, field.Forbidden(sp.Child("persistentVolumeReclaimPolicy"), "may not be 'recycle' for a hostPath mount of '/'"))
	}
	if s.StorageClassName != "" {
		errs = append(errs, className(s.StorageClassName, sp.Child("storageClassName"))...)
	}
	if s.VolumeMode != nil {
		errs = append(errs, oneOf(*s.VolumeMode, sp.Child("volumeMode"), volumeModes...)...)
	}
	if c := s.VolumeAttributesClassName; c != nil {
		vp := sp.Child("volumeAttributesClassName")
		if *c == "" {
			errs = append(errs, field.Required(vp, "an empty string is disallowed"))
		} else {
			errs = append(errs, className(*c, vp)...)
		}
		if s.CSI == nil {
			errs = append(errs, field.Required(sp.Child("csi"), "has to be specified when using volumeAttributesClassName"))
		}
	}
	// Only network filesystems take mount options; the others would silently ignore them.
	if _, ok := v.Annotations[corev1.MountOptionAnnotation]; ok && !takesMountOptions(&s.PersistentVolumeSource) {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations", corev1.MountOptionAnnotation), "may not specify mount options for this volume type"))
	}
	return errs
}

func takesMountOptions(s *corev1.PersistentVolumeSource) bool {
	return s.GCEPersistentDisk != nil || s.AWSElasticBlockStore != nil || s.Glusterfs != nil || s.NFS != nil || s.RBD != nil ||
		s.Quobyte != nil || s.ISCSI != nil || s.Cinder != nil || s.CephFS != nil || s.AzureFile != nil ||
		s.VsphereVolume != nil || s.AzureDisk != nil || s.PhotonPersistentDisk != nil
}

// validateVolumeSource checks that exactly one volume source is set, and the fields of the
// sources kplane's node agent can serve (hostPath, local) and of the common network ones.
func validateVolumeSource(s *corev1.PersistentVolumeSource, sp *field.Path) field.ErrorList {
	var errs field.ErrorList
	sources := []struct {
		name string
		set  bool
		fn   func(*field.Path) field.ErrorList
	}{
		{"hostPath", s.HostPath != nil, func(p *field.Path) field.ErrorList {
			if s.HostPath.Path == "" {
				return field.ErrorList{field.Required(p.Child("path"), "")}
			}
			errs := noBacksteps(s.HostPath.Path, p.Child("path"))
			if t := s.HostPath.Type; t != nil && !slices.Contains(hostPathTypes, *t) {
				errs = append(errs, field.NotSupported(p.Child("type"), *t, hostPathTypes))
			}
			return errs
		}},
		{"gcePersistentDisk", s.GCEPersistentDisk != nil, nil},
		{"awsElasticBlockStore", s.AWSElasticBlockStore != nil, nil},
		{"glusterfs", s.Glusterfs != nil, nil},
		{"flocker", s.Flocker != nil, nil},
		{"nfs", s.NFS != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.NFS.Server == "" {
				errs = append(errs, field.Required(p.Child("server"), ""))
			}
			switch {
			case s.NFS.Path == "":
				errs = append(errs, field.Required(p.Child("path"), ""))
			case !path.IsAbs(s.NFS.Path):
				errs = append(errs, field.Invalid(p.Child("path"), s.NFS.Path, "must be an absolute path"))
			}
			return errs
		}},
		{"rbd", s.RBD != nil, nil},
		{"quobyte", s.Quobyte != nil, nil},
		{"cephFS", s.CephFS != nil, nil},
		{"iscsi", s.ISCSI != nil, nil},
		{"cinder", s.Cinder != nil, nil},
		{"fc", s.FC != nil, nil},
		{"flexVolume", s.FlexVolume != nil, nil},
		{"azureFile", s.AzureFile != nil, nil},
		{"vsphereVolume", s.VsphereVolume != nil, nil},
		{"photonPersistentDisk", s.PhotonPersistentDisk != nil, nil},
		{"portworxVolume", s.PortworxVolume != nil, nil},
		{"azureDisk", s.AzureDisk != nil, nil},
		{"scaleIO", s.ScaleIO != nil, nil},
		{"local", s.Local != nil, func(p *field.Path) field.ErrorList {
			if s.Local.Path == "" {
				return field.ErrorList{field.Required(p.Child("path"), "")}
			}
			return noBacksteps(s.Local.Path, p.Child("path"))
		}},
		{"storageos", s.StorageOS != nil, nil},
		{"csi", s.CSI != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.CSI.Driver == "" {
				errs = append(errs, field.Required(p.Child("driver"), ""))
			}
			if s.CSI.VolumeHandle == "" {
				errs = append(errs, field.Required(p.Child("volumeHandle"), ""))
			}
			return errs
		}},
	}
	n := 0
	for _, src := range sources {
		if !src.set {
			continue
		}
		p := sp.Child(src.name)
		if n > 0 {
			errs = append(errs, field.Forbidden(p, "may not specify more than 1 volume type"))
			continue
		}
		n++
		if src.fn != nil {
			errs = append(errs, src.fn(p)...)
		}
	}
	if n == 0 {
		errs = append(errs, field.Required(sp, "must specify a volume type"))
	}
	return errs
}

// validateNodeSelector checks a required node selector (a volume's node affinity): at least one
// term, each requirement with a known operator, a label key and the values its operator needs.
func validateNodeSelector(s *corev1.NodeSelector, p *field.Path) field.ErrorList {
	tp := p.Child("nodeSelectorTerms")
	if len(s.NodeSelectorTerms) == 0 {
		return field.ErrorList{field.Required(tp, "must have at least one node selector term")}
	}
	var errs field.ErrorList
	for i, term := range s.NodeSelectorTerms {
		for j, r := range term.MatchExpressions {
			rp := tp.Index(i).Child("matchExpressions").Index(j)
			vp := rp.Child("values")
			switch r.Operator {
			case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
				if len(r.Values) == 0 {
					errs = append(errs, field.Required(vp, "must be specified when `operator` is 'In' or 'NotIn'"))
				}
			case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
				if len(r.Values) > 0 {
					errs = append(errs, field.Forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
				}
			case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
				if len(r.Values) != 1 {
					errs = append(errs, field.Required(vp, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
				}
			default:
				errs = append(errs, field.Invalid(rp.Child("operator"), r.Operator, "not a valid selector operator"))
			}
			errs = append(errs, metav1validation.ValidateLabelName(r.Key, rp.Child("key"))...)
			for k, v := range r.Values {
				errs = append(errs, msgs(vp.Index(k), v, validation.IsValidLabelValue(v))...)
			}
		}
		for j, r := range term.MatchFields {
			rp := tp.Index(i).Child("matchFields").Index(j)
			if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
				errs = append(errs, field.Invalid(rp.Child("operator"), r.Operator, "not a valid selector operator"))
			} else if len(r.Values) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
			}
			if r.Key != metav1.ObjectNameField {
				errs = append(errs, field.Invalid(rp.Child("key"), r.Key, "not a valid field selector key"))
			}
			for k, v := range r.Values {
				errs = append(errs, dnsSubdomain(v, rp.Child("values").Index(k))...)
			}
		}
	}
	return errs
}

// validatePersistentVolumeUpdate keeps what was provisioned: the volume source, its mode and,
// once set, its node affinity.
func validatePersistentVolumeUpdate(v, old *corev1.PersistentVolume) field.ErrorList {
	var errs field.ErrorList
	if !apiequality.Semantic.DeepEqual(v.Spec.PersistentVolumeSource, old.Spec.PersistentVolumeSource) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "persistentvolumesource"), "spec.persistentvolumesource is immutable after creation"))
	}
	if !apiequality.Semantic.DeepEqual(v.Spec.VolumeMode, old.Spec.VolumeMode) {
		errs = append(errs, immutable(v.Spec.VolumeMode, field.NewPath("volumeMode"))...)
	}
	if old.Spec.NodeAffinity != nil && !apiequality.Semantic.DeepEqual(v.Spec.NodeAffinity, old.Spec.NodeAffinity) {
		errs = append(errs, field.Invalid(field.NewPath("nodeAffinity"), v.Spec.NodeAffinity, "field is immutable, except for updating from beta label to GA"))
	}
	if old.Spec.VolumeAttributesClassName != nil && v.Spec.VolumeAttributesClassName == nil {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "volumeAttributesClassName"), "update from non-nil value to nil is forbidden"))
	}
	return errs
}

func validatePersistentVolumeClaim(c *corev1.PersistentVolumeClaim) field.ErrorList {
	sp := field.NewPath("spec")
	s := &c.Spec
	errs := validateAccessModes(s.AccessModes, "at least 1 access mode is required", sp.Child("accessModes"))
	if s.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(s.Selector, metav1validation.LabelSelectorValidationOptions{}, sp.Child("selector"))...)
	}
	rp := sp.Child("resources").Key(string(corev1.ResourceStorage))
	if q, ok := s.Resources.Requests[corev1.ResourceStorage]; !ok {
		errs = append(errs, field.Required(rp, ""))
	} else {
		errs = append(errs, positiveQuantity(q, rp)...)
	}
	if s.StorageClassName != nil && *s.StorageClassName != "" {
		errs = append(errs, className(*s.StorageClassName, sp.Child("storageClassName"))...)
	}
	if s.VolumeMode != nil {
		errs = append(errs, oneOf(*s.VolumeMode, sp.Child("volumeMode"), volumeModes...)...)
	}
	if s.VolumeAttributesClassName != nil && *s.VolumeAttributesClassName != "" {
		errs = append(errs, className(*s.VolumeAttributesClassName, sp.Child("volumeAttributesClassName"))...)
	}
	source := func(group *string, kind, name string, p *field.Path) {
		if name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if kind == "" {
			errs = append(errs, field.Required(p.Child("kind"), ""))
		}
		if deref(group) == "" && kind != "PersistentVolumeClaim" {
			errs = append(errs, field.Invalid(p, kind, "must be 'PersistentVolumeClaim' when referencing the default apiGroup"))
		} else if deref(group) != "" {
			errs = append(errs, dnsSubdomain(*group, p.Child("apiGroup"))...)
		}
	}
	if d := s.DataSource; d != nil {
		source(d.APIGroup, d.Kind, d.Name, sp.Child("dataSource"))
	}
	if d := s.DataSourceRef; d != nil {
		source(d.APIGroup, d.Kind, d.Name, sp.Child("dataSourceRef"))
		if ns := deref(d.Namespace); ns != "" {
			errs = append(errs, msgs(sp.Child("dataSourceRef", "namespace"), ns, validation.IsDNS1123Label(ns))...)
			if s.DataSource != nil {
				errs = append(errs, field.Invalid(sp, sp.Child("dataSource"), "may not be specified when dataSourceRef.namespace is specified"))
			}
		} else if ds := s.DataSource; ds != nil && (deref(ds.APIGroup) != deref(d.APIGroup) || ds.Kind != d.Kind || ds.Name != d.Name) {
			errs = append(errs, field.Invalid(sp, sp.Child("dataSource"), "must match dataSourceRef"))
		}
	}
	for name, q := range c.Status.Capacity {
		errs = append(errs, nonNegativeQuantity(q, field.NewPath("status", "capacity").Key(string(name)))...)
	}
	return errs
}

func nonNegativeQuantity(q resource.Quantity, p *field.Path) field.ErrorList {
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, q.Value(), "must be a valid resource quantity")}
	}
	return nil
}

// validatePersistentVolumeClaimUpdate keeps a claim's spec as created, except what the binder
// fills in (volumeName, once), a class given to a claim that had none, and, for a bound
// claim, the storage request (which admission lets grow only where the class allows it).
func validatePersistentVolumeClaimUpdate(c, old *corev1.PersistentVolumeClaim) field.ErrorList {
	var errs field.ErrorList
	was, now := old.Spec.DeepCopy(), c.Spec.DeepCopy()
	if was.VolumeName == "" {
		was.VolumeName = now.VolumeName
	}
	beta, hadBeta := old.Annotations[corev1.BetaStorageClassAnnotation]
	newBeta, hasBeta := c.Annotations[corev1.BetaStorageClassAnnotation]
	switch {
	case hadBeta && was.StorageClassName == nil && now.StorageClassName != nil && *now.StorageClassName == beta && (!hasBeta || newBeta == beta):
		// The class moves from the old annotation to the field.
		now.StorageClassName = nil
	default:
		if newBeta != beta {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations", corev1.BetaStorageClassAnnotation), newBeta, "field is immutable"))
		}
		if was.StorageClassName == nil && now.StorageClassName != nil && (!hadBeta || *now.StorageClassName == beta) {
			was.StorageClassName = now.StorageClassName // a class given later (the default one, retroactively)
		}
	}
	if c.Status.Phase == corev1.ClaimBound {
		if now.Resources.Requests != nil {
			now.Resources.Requests[corev1.ResourceStorage] = old.Spec.Resources.Requests[corev1.ResourceStorage]
		}
		now.VolumeAttributesClassName = was.VolumeAttributesClassName
	}
	if !apiequality.Semantic.DeepEqual(now, was) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))
	}
	size, oldSize := c.Spec.Resources.Requests[corev1.ResourceStorage], old.Spec.Resources.Requests[corev1.ResourceStorage]
	// A failed expansion may be taken back, but not below what the volume already has.
	if capacity := old.Status.Capacity[corev1.ResourceStorage]; size.Cmp(oldSize) < 0 && size.Cmp(capacity) <= 0 {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "resources", "requests", "storage"), "field can not be less than status.capacity"))
	}
	if !apiequality.Semantic.DeepEqual(c.Spec.VolumeMode, old.Spec.VolumeMode) {
		errs = append(errs, immutable(c.Spec.VolumeMode, field.NewPath("volumeMode"))...)
	}
	return errs
}

func validateStorageClass(sc *storagev1.StorageClass) field.ErrorList {
	errs := validateProvisioner(sc.Provisioner, field.NewPath("provisioner"))
	errs = append(errs, validateClassParameters(sc.Parameters, field.NewPath("parameters"))...)
	if sc.ReclaimPolicy != nil && *sc.ReclaimPolicy != "" {
		errs = append(errs, oneOf(*sc.ReclaimPolicy, field.NewPath("reclaimPolicy"), corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRetain)...)
	}
	mp := field.NewPath("volumeBindingMode")
	if sc.VolumeBindingMode == nil {
		errs = append(errs, field.Required(mp, ""))
	} else {
		errs = append(errs, oneOf(*sc.VolumeBindingMode, mp, storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer)...)
	}
	tp := field.NewPath("allowedTopologies")
	for i, term := range sc.AllowedTopologies {
		ip := tp.Index(i).Child("matchLabelExpressions")
		if len(term.MatchLabelExpressions) == 0 {
			errs = append(errs, field.Required(ip, "must have at least one label requirement"))
		}
		for j, r := range term.MatchLabelExpressions {
			rp := ip.Index(j)
			errs = append(errs, metav1validation.ValidateLabelName(r.Key, rp.Child("key"))...)
			if len(r.Values) == 0 {
				errs = append(errs, field.Required(rp.Child("values"), ""))
			}
			seen := map[string]bool{}
			for k, v := range r.Values {
				errs = append(errs, unique(seen, v, rp.Child("values").Index(k), v)...)
			}
		}
	}
	return errs
}

// validateProvisioner checks the driver a class names: present, a qualified name in any case.
func validateProvisioner(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return metav1validation.ValidateLabelName(strings.ToLower(name), p)
}

// validateClassParameters bounds the parameters a class passes to its driver.
func validateClassParameters(params map[string]string, p *field.Path) field.ErrorList {
	if len(params) > 512 {
		return field.ErrorList{field.TooLong(p, "", 512)}
	}
	var errs field.ErrorList
	size := 0
	for k, v := range params {
		if k == "" {
			errs = append(errs, field.Invalid(p, k, "field can not be empty."))
		}
		size += len(k) + len(v)
	}
	if size > 256<<10 {
		errs = append(errs, field.TooLong(p, "", 256<<10))
	}
	return errs
}

func persistentVolumeRow(v *corev1.PersistentVolume) []any {
	claim := ""
	if r := v.Spec.ClaimRef; r != nil {
		claim = r.Namespace + "/" + r.Name
	}
	phase := string(v.Status.Phase)
	if v.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	capacity := v.Spec.Capacity[corev1.ResourceStorage]
	return []any{capacity.String(), pv.AccessModesString(v.Spec.AccessModes), string(v.Spec.PersistentVolumeReclaimPolicy),
		phase, claim, pv.VolumeClass(v), unset(v.Spec.VolumeAttributesClassName), v.Status.Reason, Age(v.CreationTimestamp),
		unset(v.Spec.VolumeMode)}
}

func persistentVolumeClaimRow(c *corev1.PersistentVolumeClaim) []any {
	phase := string(c.Status.Phase)
	if c.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	capacity, modes := "", ""
	// Capacity and modes are the bound volume's; an unbound claim shows none.
	if c.Spec.VolumeName != "" {
		q := c.Status.Capacity[corev1.ResourceStorage]
		capacity, modes = q.String(), pv.AccessModesString(c.Status.AccessModes)
	}
	return []any{phase, c.Spec.VolumeName, capacity, modes, pv.ClaimClass(c), unset(c.Spec.VolumeAttributesClassName),
		Age(c.CreationTimestamp), unset(c.Spec.VolumeMode)}
}

// unset is kubectl's "<unset>" for an optional field left out.
func unset[T ~string](p *T) string {
	if p == nil {
		return "<unset>"
	}
	return string(*p)
}
