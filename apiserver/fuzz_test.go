package apiserver

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/kplane/kplane/apiserver/registry"
	"github.com/kplane/kplane/storage"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// noClaims answers allocation lookups as if every ClusterIP and NodePort were free.
type noClaims struct{}

func (noClaims) Taken(context.Context, string) (bool, error) { return false, nil }

// FuzzDecodeAndValidate drives arbitrary request bodies through what a create does before it
// reaches storage: decoding (JSON, YAML, protobuf, each strict or not), defaulting, allocation
// and validation, for every resource. Nothing may panic; a body is either an object or an error.
func FuzzDecodeAndValidate(f *testing.F) {
	seeds := []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}]}]}}`,
		`{"metadata":{"name":"s"},"spec":{"type":"NodePort","ports":[{"port":80,"targetPort":"http","nodePort":30001}],"selector":{"a":"b"}}}`,
		`{"metadata":{"name":"d"},"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`,
		`{"metadata":{"name":"e"},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"]}],"ports":[{"port":80}]}`,
		`{"metadata":{"name":"x","labels":{"a":"b"},"annotations":{"k":"v"}},"data":{"a":"b"},"bogus":1}`,
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: y\n",
		"k8s\x00\x0a\x04\x0a\x02v1\x12\x03Pod",
		`{"metadata":{"name":"ns"},"spec":{"finalizers":["kubernetes"]}}`,
		`[]`, `null`, `{"metadata":[]}`,
	}
	for _, s := range seeds {
		for ct := uint8(0); ct < 3; ct++ {
			f.Add([]byte(s), ct, uint8(0))
		}
	}
	_, cidr, _ := net.ParseCIDR("10.96.0.0/12")
	defs := registry.All(&registry.ServiceAllocation{ClusterIPRange: cidr, NodePortBase: 30000, NodePortSize: 2768})
	contentTypes := []string{mimeJSON, mimeYAML, mimeProtobuf}
	validations := []fieldValidation{validationStrict, validationWarn, validationIgnore}
	f.Fuzz(func(t *testing.T, body []byte, ct, which uint8) {
		def := defs[int(which)%len(defs)]
		obj := def.NewObject()
		w := httptest.NewRecorder()
		err := decodeObject(w, body, contentTypes[int(ct)%3], validations[int(ct/3)%3], def.Describe().GVK(), obj)
		if err != nil {
			return
		}
		obj.SetNamespace("default")
		def.PrepareCreate(obj)
		errs := def.AllocateFor(context.Background(), noClaims{}, obj, nil)
		errs = append(errs, def.ValidateObject(obj, nil)...)
		old := obj.DeepCopyObject().(storage.Object)
		def.PrepareUpdate(obj, old, "")
		_ = def.ValidateObject(obj, old)
		_ = def.TableRow(obj)
		_ = def.SelectableFields(obj)
		if len(errs) == 0 {
			// A valid object must survive the storage encoding round trip.
			data, err := StorageCodec{}.Encode(obj)
			if err != nil {
				t.Fatalf("valid %s does not encode: %v", def.Describe().Kind, err)
			}
			back := def.NewObject()
			if err := (StorageCodec{}).Decode(data, back); err != nil {
				t.Fatalf("stored %s does not decode: %v", def.Describe().Kind, err)
			}
			// Protobuf does not tell an empty list from a missing one (nor does Kubernetes' storage).
			back.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
			if !apiequality.Semantic.DeepEqual(obj, back) {
				t.Fatalf("storage round trip changed the %s:\n%#v\n%#v", def.Describe().Kind, obj, back)
			}
		}
	})
}
