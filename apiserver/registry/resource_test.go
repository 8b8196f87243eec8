package registry

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func newClaimSpec() resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
		{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com",
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}}}}}
}

func newResourceClaim() *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: meta("gpu"), Spec: newClaimSpec()}
}

func TestResourceClaim(t *testing.T) {
	req := func(c *resourcev1.ResourceClaim) *resourcev1.DeviceRequest { return &c.Spec.Devices.Requests[0] }
	checkCreate(t, resourceClaims, newResourceClaim, []validCase[*resourcev1.ResourceClaim]{
		{"valid", nil, nil},
		{"first available", func(c *resourcev1.ResourceClaim) {
			e := req(c).Exactly
			req(c).Exactly, req(c).FirstAvailable = nil, []resourcev1.DeviceSubRequest{{Name: "big", DeviceClassName: e.DeviceClassName}, {Name: "small", DeviceClassName: e.DeviceClassName}}
			c.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{Requests: []string{"gpu/small"},
				DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
		}, nil},
		{"neither kind of request", func(c *resourcev1.ResourceClaim) { req(c).Exactly = nil }, []string{"FieldValueRequired spec.devices.requests[0]"}},
		{"bad name, no class", func(c *resourcev1.ResourceClaim) { req(c).Name, req(c).Exactly.DeviceClassName = "Gpu", "" },
			[]string{"FieldValueInvalid spec.devices.requests[0].name", "FieldValueRequired spec.devices.requests[0].exactly.deviceClassName"}},
		{"count with All", func(c *resourcev1.ResourceClaim) {
			req(c).Exactly.AllocationMode, req(c).Exactly.Count = resourcev1.DeviceAllocationModeAll, 2
		}, []string{"FieldValueInvalid spec.devices.requests[0].exactly.count"}},
		{"empty selector", func(c *resourcev1.ResourceClaim) { req(c).Exactly.Selectors[0].CEL.Expression = "" },
			[]string{"FieldValueRequired spec.devices.requests[0].exactly.selectors[0].cel.expression"}},
		{"constraint on no request", func(c *resourcev1.ResourceClaim) {
			c.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{"nope"}}}
		}, []string{"FieldValueInvalid spec.devices.constraints[0].requests[0]", "FieldValueRequired spec.devices.constraints[0]"}},
		{"reserved while unallocated", func(c *resourcev1.ResourceClaim) {
			c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: types.UID("u1")}}
		}, nil}, // status is reset on create
	})
	checkUpdate(t, resourceClaims, newResourceClaim, []validCase[*resourcev1.ResourceClaim]{
		{"labels", func(c *resourcev1.ResourceClaim) { c.Labels = map[string]string{"a": "b"} }, nil},
		{"spec", func(c *resourcev1.ResourceClaim) { req(c).Exactly.DeviceClassName = "other" }, []string{"FieldValueInvalid spec"}},
	})
	c := newResourceClaim()
	resourceClaims.PrepareCreate(c)
	c.ResourceVersion = "1"
	if e := req(c).Exactly; e.AllocationMode != resourcev1.DeviceAllocationModeExactCount || e.Count != 1 || c.Generation != 0 {
		t.Errorf("defaults %+v, generation %d", e, c.Generation)
	}
	checkTable(t, resourceClaims, c, []string{"Name", "State", "Age"}, []any{"pending", "<unknown>"})
	// Reservations need an allocation; the status write keeps the spec.
	reserved := c.DeepCopy()
	reserved.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: types.UID("u1")}}
	resourceClaims.PrepareUpdate(reserved, c, "status")
	if got := errs(resourceClaims.ValidateObject(reserved, c)); len(got) != 1 || got[0] != "FieldValueForbidden status.reservedFor" {
		t.Errorf("reserved without allocation: %q", got)
	}
	reserved.Status.Allocation = &resourcev1.AllocationResult{}
	if got := errs(resourceClaims.ValidateObject(reserved, c)); len(got) != 0 {
		t.Errorf("reserved with allocation: %q", got)
	}
	checkTable(t, resourceClaims, reserved, []string{"Name", "State", "Age"}, []any{"allocated,reserved", "<unknown>"})
}

func TestResourceClaimTemplateAndDeviceClass(t *testing.T) {
	template := func() *resourcev1.ResourceClaimTemplate {
		return &resourcev1.ResourceClaimTemplate{ObjectMeta: meta("gpu"), Spec: resourcev1.ResourceClaimTemplateSpec{Spec: newClaimSpec()}}
	}
	checkCreate(t, resourceClaimTemplates, template, []validCase[*resourcev1.ResourceClaimTemplate]{
		{"valid", nil, nil},
		{"bad label and request", func(rt *resourcev1.ResourceClaimTemplate) {
			rt.Spec.Labels = map[string]string{"a": "no good"}
			rt.Spec.Spec.Devices.Requests[0].Exactly = nil
		}, []string{"FieldValueInvalid spec.metadata.labels", "FieldValueRequired spec.spec.devices.requests[0]"}},
	})
	checkUpdate(t, resourceClaimTemplates, template, []validCase[*resourcev1.ResourceClaimTemplate]{
		{"spec", func(rt *resourcev1.ResourceClaimTemplate) { rt.Spec.Labels = map[string]string{"a": "b"} }, []string{"FieldValueInvalid spec"}},
	})
	checkTable(t, resourceClaimTemplates, template(), []string{"Name", "Age"}, []any{"<unknown>"})

	class := func() *resourcev1.DeviceClass {
		return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}, Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}}}}
	}
	checkCreate(t, deviceClasses, class, []validCase[*resourcev1.DeviceClass]{
		{"valid", nil, nil},
		{"empty selector and config", func(c *resourcev1.DeviceClass) {
			c.Spec.Selectors = append(c.Spec.Selectors, resourcev1.DeviceSelector{})
			c.Spec.Config = []resourcev1.DeviceClassConfiguration{{}}
		}, []string{"FieldValueRequired spec.config[0].opaque", "FieldValueRequired spec.selectors[1].cel"}},
		{"extended resource name", func(c *resourcev1.DeviceClass) { c.Spec.ExtendedResourceName = new("example.com/gpu") }, nil},
		{"not an extended resource name", func(c *resourcev1.DeviceClass) { c.Spec.ExtendedResourceName = new("gpu") },
			[]string{"FieldValueInvalid spec.extendedResourceName"}},
	})
	c := class()
	deviceClasses.PrepareCreate(c)
	if c.Generation != 1 {
		t.Errorf("generation %d", c.Generation)
	}
	checkTable(t, deviceClasses, c, []string{"Name", "Age"}, []any{"<unknown>"})
}

func TestResourceSlice(t *testing.T) {
	slice := func() *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com", NodeName: new("node-1"), Pool: resourcev1.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"model": {StringValue: new("a100")}, "gpu.example.com/driverVersion": {VersionValue: new("1.2.3")}}}}}}
	}
	dev := func(s *resourcev1.ResourceSlice) *resourcev1.Device { return &s.Spec.Devices[0] }
	checkCreate(t, resourceSlices, slice, []validCase[*resourcev1.ResourceSlice]{
		{"valid", nil, nil},
		{"no node choice", func(s *resourcev1.ResourceSlice) { s.Spec.NodeName = nil }, []string{"FieldValueRequired spec"}},
		{"two node choices", func(s *resourcev1.ResourceSlice) { s.Spec.AllNodes = new(true) }, []string{"FieldValueInvalid spec"}},
		{"bad pool", func(s *resourcev1.ResourceSlice) { s.Spec.Pool.Name, s.Spec.Pool.ResourceSliceCount = "", 0 },
			[]string{"FieldValueInvalid spec.pool.resourceSliceCount", "FieldValueRequired spec.pool.name"}},
		{"attributes", func(s *resourcev1.ResourceSlice) {
			dev(s).Attributes["9bad"] = resourcev1.DeviceAttribute{}
			dev(s).Attributes["model"] = resourcev1.DeviceAttribute{StringValue: new("x"), IntValue: new(int64(1))}
			dev(s).Attributes["gpu.example.com/driverVersion"] = resourcev1.DeviceAttribute{VersionValue: new("v1")}
		}, []string{"FieldValueInvalid spec.devices[0].attributes", "FieldValueInvalid spec.devices[0].attributes[9bad]",
			"FieldValueInvalid spec.devices[0].attributes[gpu.example.com/driverVersion].version", "FieldValueInvalid spec.devices[0].attributes[model]"}},
		{"device twice", func(s *resourcev1.ResourceSlice) { s.Spec.Devices = append(s.Spec.Devices, s.Spec.Devices[0]) },
			[]string{"FieldValueDuplicate spec.devices[1]"}},
	})
	checkUpdate(t, resourceSlices, slice, []validCase[*resourcev1.ResourceSlice]{
		{"pool generation", func(s *resourcev1.ResourceSlice) { s.Spec.Pool.Generation = 2 }, nil},
		{"driver, node and pool", func(s *resourcev1.ResourceSlice) {
			s.Spec.Driver, s.Spec.NodeName, s.Spec.Pool.Name = "other.example.com", new("node-2"), "other"
		}, []string{"FieldValueInvalid spec.driver", "FieldValueInvalid spec.nodeName", "FieldValueInvalid spec.pool.name"}},
	})
	s := slice()
	resourceSlices.PrepareCreate(s)
	if f := resourceSlices.SelectableFields(s); f["spec.nodeName"] != "node-1" || f["spec.driver"] != "gpu.example.com" || s.Generation != 1 {
		t.Errorf("fields %v, generation %d", f, s.Generation)
	}
	checkTable(t, resourceSlices, s, []string{"Name", "Node", "Driver", "Pool", "Age"}, []any{"node-1", "gpu.example.com", "node-1", "<unknown>"})
}
