package registry

import (
	"slices"
	"testing"
)

// Helpers for the table-driven tests of the resources that are stored and checked but that
// no kplane controller acts on (core.go, events.go, networking.go, runtimeclasses.go,
// scheduling.go, csi.go, resource.go).

// validCase changes a valid object and lists the causes ("Type path") validation must give.
type validCase[T Object] struct {
	name   string
	change func(T)
	want   []string
}

// checkCreate prepares each case's object as a create does and compares the causes.
func checkCreate[T Object](t *testing.T, d *Def[T], base func() T, cases []validCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			if tc.change != nil {
				tc.change(o)
			}
			d.PrepareCreate(o)
			if got := errs(d.ValidateObject(o, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("causes\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// checkUpdate creates the base object, applies each case's change as an update of it and
// compares the causes.
func checkUpdate[T Object](t *testing.T, d *Def[T], base func() T, cases []validCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := base()
			d.PrepareCreate(old)
			old.SetResourceVersion("1")
			o := old.DeepCopyObject().(T)
			tc.change(o)
			d.PrepareUpdate(o, old, "")
			if got := errs(d.ValidateObject(o, old)); !slices.Equal(got, tc.want) {
				t.Errorf("causes\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// checkTable compares the column names and a row's cells (without the name) with what
// kubectl shows for the same object against kube-apiserver v1.36.
func checkTable[T Object](t *testing.T, d *Def[T], obj T, header []string, cells []any) {
	t.Helper()
	var names []string
	for _, c := range d.TableColumns() {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, header) {
		t.Errorf("columns\n got %q\nwant %q", names, header)
	}
	row := d.TableRow(obj)
	if len(row) != len(header) {
		t.Fatalf("row has %d cells for %d columns: %v", len(row), len(header), row)
	}
	if got := row[1:]; !slices.Equal(got, cells) {
		t.Errorf("cells\n got %#v\nwant %#v", got, cells)
	}
}
