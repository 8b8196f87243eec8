package apiserver

import (
	"bytes"

	"github.com/kplane/kplane/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// toTable renders objects as a meta.k8s.io/v1 Table, the form kubectl get prints.
// includeObject is "None", "Metadata" (the default) or "Object".
func toTable(res *resource, objs []storage.Object, rv, includeObject string, withColumns bool) (*metav1.Table, error) {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}}
	t.ResourceVersion = rv
	if withColumns {
		t.ColumnDefinitions = res.strategy.TableColumns()
	}
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, obj := range objs {
		row := metav1.TableRow{Cells: res.strategy.TableRow(obj)}
		var embedded runtime.Object
		switch includeObject {
		case "None":
		case "Object":
			embedded = obj
		case "", "Metadata":
			embedded = partialMetadata(obj)
		default:
			return nil, apierrors.NewBadRequest("includeObject must be one of None, Metadata, Object")
		}
		if embedded != nil {
			var buf bytes.Buffer
			if err := jsonSerializer.Encode(embedded, &buf); err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			row.Object = runtime.RawExtension{Raw: bytes.TrimSpace(buf.Bytes())}
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// listItems returns the items of a typed list.
func listItems(list runtime.Object) []storage.Object {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	out := make([]storage.Object, len(items))
	for i, it := range items {
		out[i] = it.(storage.Object)
	}
	return out
}

func setListItems(list runtime.Object, items []runtime.Object) error {
	if err := meta.SetList(list, items); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}
