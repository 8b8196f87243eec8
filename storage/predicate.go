package storage

import (
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// AttrFunc returns the labels and selectable fields of an object.
type AttrFunc func(Object) (labels.Set, fields.Set)

// Predicate selects objects by label and field selectors. The zero value matches everything.
type Predicate struct {
	Label labels.Selector
	Field fields.Selector
	Attrs AttrFunc
}

// Empty reports whether the predicate matches everything.
func (p Predicate) Empty() bool {
	return (p.Label == nil || p.Label.Empty()) && (p.Field == nil || p.Field.Empty())
}

// Matches reports whether obj passes both selectors.
func (p Predicate) Matches(obj Object) bool {
	if p.Empty() {
		return true
	}
	if p.Field == nil || p.Field.Empty() {
		return p.Label.Matches(labels.Set(obj.GetLabels()))
	}
	ls, fs := p.Attrs(obj)
	return (p.Label == nil || p.Label.Matches(ls)) && p.Field.Matches(fs)
}
