package registry

import (
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCSIDriver(t *testing.T) {
	base := func() *storagev1.CSIDriver {
		return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "hostpath.csi.example.com"},
			Spec: storagev1.CSIDriverSpec{AttachRequired: new(false), PodInfoOnMount: new(true),
				VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}
	}
	checkCreate(t, csiDrivers, base, []validCase[*storagev1.CSIDriver]{
		{"valid", nil, nil},
		{"unknown policy and mode", func(d *storagev1.CSIDriver) {
			d.Spec.FSGroupPolicy = new(storagev1.FSGroupPolicy("Maybe"))
			d.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{"Forever"}
		}, []string{"FieldValueNotSupported spec.fsGroupPolicy", "FieldValueNotSupported spec.volumeLifecycleModes"}},
		{"short and repeated token audiences", func(d *storagev1.CSIDriver) {
			d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "a", ExpirationSeconds: new(int64(5))}, {Audience: "a"}}
		}, []string{"FieldValueDuplicate spec.tokenRequests[1].audience", "FieldValueInvalid spec.tokenRequests[0].expirationSeconds"}},
	})
	checkUpdate(t, csiDrivers, base, []validCase[*storagev1.CSIDriver]{
		{"podInfoOnMount", func(d *storagev1.CSIDriver) { d.Spec.PodInfoOnMount = new(false) }, nil},
		{"attachRequired and modes", func(d *storagev1.CSIDriver) {
			d.Spec.AttachRequired, d.Spec.VolumeLifecycleModes = new(true), d.Spec.VolumeLifecycleModes[:1]
		}, []string{"FieldValueInvalid spec.attachedRequired", "FieldValueInvalid spec.volumeLifecycleModes"}},
	})
	d := base()
	csiDrivers.PrepareCreate(d)
	s := d.Spec
	if deref(s.StorageCapacity) || deref(s.RequiresRepublish) || s.SELinuxMount == nil || deref(s.FSGroupPolicy) != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy || d.Generation != 0 {
		t.Errorf("defaults %+v, generation %d", s, d.Generation)
	}
	checkTable(t, csiDrivers, d, []string{"Name", "AttachRequired", "PodInfoOnMount", "StorageCapacity", "TokenRequests", "RequiresRepublish", "Modes", "Age"},
		[]any{false, true, false, "<unset>", false, "Persistent,Ephemeral", "<unknown>"})
}

func TestCSINodeAndCapacity(t *testing.T) {
	node := func() *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: "hostpath.csi.example.com", NodeID: "node-1", TopologyKeys: []string{"topology.hostpath.csi/node"}}}}}
	}
	checkCreate(t, csiNodes, node, []validCase[*storagev1.CSINode]{
		{"valid", nil, nil},
		{"unnamed driver without node ID", func(n *storagev1.CSINode) { n.Spec.Drivers[0].Name, n.Spec.Drivers[0].NodeID = "", "" },
			[]string{"FieldValueRequired spec.drivers[0].name", "FieldValueRequired spec.drivers[0].nodeID"}},
		{"driver twice", func(n *storagev1.CSINode) { n.Spec.Drivers = append(n.Spec.Drivers, n.Spec.Drivers[0]) },
			[]string{"FieldValueDuplicate spec.drivers[1].name"}},
	})
	checkUpdate(t, csiNodes, node, []validCase[*storagev1.CSINode]{
		{"allocatable count", func(n *storagev1.CSINode) {
			n.Spec.Drivers[0].Allocatable = &storagev1.VolumeNodeResources{Count: new(int32(8))}
		}, nil},
		{"node ID", func(n *storagev1.CSINode) { n.Spec.Drivers[0].NodeID = "node-2" }, []string{"FieldValueInvalid spec.drivers"}},
	})
	checkTable(t, csiNodes, node(), []string{"Name", "Drivers", "Age"}, []any{int64(1), "<unknown>"})

	capacity := func() *storagev1.CSIStorageCapacity {
		q := resource.MustParse("10Gi")
		return &storagev1.CSIStorageCapacity{ObjectMeta: meta("node-1"), StorageClassName: "standard", Capacity: &q}
	}
	checkCreate(t, csiStorageCapacities, capacity, []validCase[*storagev1.CSIStorageCapacity]{
		{"valid", nil, nil},
		{"bad class, negative capacity", func(c *storagev1.CSIStorageCapacity) {
			c.StorageClassName, c.Capacity = "Bad_Name", new(resource.MustParse("-1"))
		}, []string{"FieldValueInvalid capacity", "FieldValueInvalid storageClassName"}},
	})
	checkUpdate(t, csiStorageCapacities, capacity, []validCase[*storagev1.CSIStorageCapacity]{
		{"capacity", func(c *storagev1.CSIStorageCapacity) { c.Capacity = new(resource.MustParse("5Gi")) }, nil},
		{"class", func(c *storagev1.CSIStorageCapacity) { c.StorageClassName = "other" }, []string{"FieldValueInvalid storageClassName"}},
	})
	c := capacity()
	checkTable(t, csiStorageCapacities, c, []string{"Name", "Created At"}, []any{"0001-01-01T00:00:00Z"})
}

func TestVolumeAttachmentAndAttributesClass(t *testing.T) {
	attachment := func() *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-1"}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: "hostpath.csi.example.com", NodeName: "node-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: new("pv-1")}}}
	}
	checkCreate(t, volumeAttachments, attachment, []validCase[*storagev1.VolumeAttachment]{
		{"valid", nil, nil},
		{"no attacher, no source, bad node", func(a *storagev1.VolumeAttachment) {
			a.Spec.Attacher, a.Spec.Source, a.Spec.NodeName = "", storagev1.VolumeAttachmentSource{}, "Node_1"
		}, []string{"FieldValueInvalid spec.nodeName", "FieldValueRequired spec.attacher", "FieldValueRequired spec.source"}},
	})
	checkUpdate(t, volumeAttachments, attachment, []validCase[*storagev1.VolumeAttachment]{
		{"node", func(a *storagev1.VolumeAttachment) { a.Spec.NodeName = "node-2" }, []string{"FieldValueInvalid spec"}},
	})
	a := attachment()
	a.Status.Attached = true
	volumeAttachments.PrepareCreate(a)
	if a.Status.Attached || a.Generation != 0 {
		t.Errorf("status kept on create: %+v, generation %d", a.Status, a.Generation)
	}
	attached := a.DeepCopy()
	attached.Status.Attached, attached.Spec.NodeName = true, "node-2"
	volumeAttachments.PrepareUpdate(attached, a, "status")
	if !attached.Status.Attached || attached.Spec.NodeName != "node-1" {
		t.Errorf("status write: %+v", attached)
	}
	checkTable(t, volumeAttachments, attached, []string{"Name", "Attacher", "PV", "Node", "Attached", "Age"},
		[]any{"hostpath.csi.example.com", "pv-1", "node-1", true, "<unknown>"})

	class := func() *storagev1.VolumeAttributesClass {
		return &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, DriverName: "hostpath.csi.example.com",
			Parameters: map[string]string{"iops": "3000"}}
	}
	checkCreate(t, volumeAttributesClasses, class, []validCase[*storagev1.VolumeAttributesClass]{
		{"valid", nil, nil},
		{"no driver, no parameters", func(c *storagev1.VolumeAttributesClass) { c.DriverName, c.Parameters = "", nil },
			[]string{"FieldValueRequired driverName", "FieldValueRequired parameters"}},
	})
	checkUpdate(t, volumeAttributesClasses, class, []validCase[*storagev1.VolumeAttributesClass]{
		{"driver and parameters", func(c *storagev1.VolumeAttributesClass) { c.DriverName, c.Parameters["iops"] = "x.example.com", "1" },
			[]string{"FieldValueForbidden driverName", "FieldValueForbidden parameters"}},
	})
	checkTable(t, volumeAttributesClasses, class(), []string{"Name", "DriverName", "Age"}, []any{"hostpath.csi.example.com", "<unknown>"})
}
