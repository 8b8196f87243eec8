package quota

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Arithmetic on resource lists, as quota needs it. Every function returns a new list and leaves
// its arguments alone: the lists come from cached objects that others read at the same time.

// Add returns a+b for every name in either.
func Add(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a)+len(b))
	for name, q := range a {
		out[name] = q.DeepCopy()
	}
	for name, q := range b {
		sum, ok := out[name]
		if !ok {
			out[name] = q.DeepCopy()
			continue
		}
		sum.Add(q)
		out[name] = sum
	}
	return out
}

// SubtractNonNegative returns a-b for every name in either, where no result goes below zero:
// an update that shrinks an object frees nothing at admission (the controller recounts).
func SubtractNonNegative(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a)+len(b))
	for name, q := range a {
		d := q.DeepCopy()
		if other, ok := b[name]; ok {
			d.Sub(other)
		}
		if d.Sign() < 0 {
			d = resource.MustParse("0")
		}
		out[name] = d
	}
	for name := range b {
		if _, ok := out[name]; !ok {
			out[name] = resource.MustParse("0")
		}
	}
	return out
}

// Mask returns the entries of list whose names are in names.
func Mask(list corev1.ResourceList, names []corev1.ResourceName) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range list {
		if slices.Contains(names, name) {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// Equal reports whether a and b hold the same names with the same amounts (formats aside).
func Equal(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		other, ok := b[name]
		if !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
}

// Exceeded returns the names of limits whose amount in used is larger (names used lacks are
// within their limit), sorted.
func Exceeded(used, limits corev1.ResourceList) []corev1.ResourceName {
	var out []corev1.ResourceName
	for name, limit := range limits {
		if q, ok := used[name]; ok && q.Cmp(limit) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// RemoveZeros returns the entries of list that are not zero.
func RemoveZeros(list corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range list {
		if !q.IsZero() {
			out[name] = q
		}
	}
	return out
}

// Negative returns the names whose amount is below zero, sorted.
func Negative(list corev1.ResourceList) []corev1.ResourceName {
	var out []corev1.ResourceName
	for name, q := range list {
		if q.Sign() < 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Names returns the names in list, sorted.
func Names(list corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(list))
	for name := range list {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Intersection returns the names in both a and b, without duplicates, sorted.
func Intersection(a, b []corev1.ResourceName) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, name := range a {
		if slices.Contains(b, name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Format renders a list as Kubernetes' quota messages do: "name=amount" pairs sorted by
// name and joined by commas ("pods=1,requests.cpu=500m").
func Format(list corev1.ResourceList) string {
	parts := make([]string, 0, len(list))
	for _, name := range Names(list) {
		q := list[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// FormatNames renders names sorted and joined by commas.
func FormatNames(names []corev1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}
