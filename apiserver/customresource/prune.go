package customresource

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// Prune drops the fields of obj (a whole custom resource) that its schema does not specify,
// as Kubernetes does for structural schemas, and returns their paths ("spec.foo") for the
// unknown-field warnings and errors of fieldValidation. apiVersion, kind and metadata of the
// object and of embedded resources are kept; null values of fields that are not nullable are
// dropped too (they then get their default, if any).
func (s *Schema) Prune(obj map[string]any) []string {
	var pruned []string
	s.pruneObject(obj, "", true, &pruned)
	return pruned
}

func (s *Schema) pruneObject(obj map[string]any, path string, resource bool, pruned *[]string) {
	for k, v := range obj {
		p := join(path, k)
		if resource && (k == "apiVersion" || k == "kind" || k == "metadata") {
			// A resource's metadata is ObjectMeta, pruned by its own type, not the schema.
			continue
		}
		c := s.child(k)
		if c == nil {
			if s != nil && s.PreserveUnknown {
				continue
			}
			delete(obj, k)
			*pruned = append(*pruned, p)
			continue
		}
		if v == nil && !c.Nullable && c.Type != "" {
			delete(obj, k)
			continue
		}
		c.pruneValue(v, p, pruned)
	}
}

func (s *Schema) pruneValue(v any, path string, pruned *[]string) {
	switch val := v.(type) {
	case map[string]any:
		if s.Type == "" && s.Properties == nil && s.Additional == nil && !s.Embedded {
			// x-kubernetes-preserve-unknown-fields (or int-or-string) without structure.
			if s.PreserveUnknown {
				return
			}
		}
		s.pruneObject(val, path, s.Embedded, pruned)
	case []any:
		if s.Items == nil {
			return
		}
		for i, item := range val {
			s.Items.pruneValue(item, path+"["+itoa(i)+"]", pruned)
		}
	}
}

// ApplyDefaults fills obj's missing fields that have defaults, at every level, and replaces null
// values of non-nullable fields with their defaults.
func (s *Schema) ApplyDefaults(obj map[string]any) {
	s.defaultValue(obj)
}

func (s *Schema) defaultValue(v any) {
	if s == nil {
		return
	}
	switch val := v.(type) {
	case map[string]any:
		for name, prop := range s.Properties {
			cur, ok := val[name]
			if prop.HasDefault && (!ok || (cur == nil && !prop.Nullable)) {
				val[name] = runtime.DeepCopyJSONValue(prop.Default)
			}
		}
		for k, item := range val {
			if c := s.child(k); c != nil {
				c.defaultValue(item)
			}
		}
	case []any:
		for _, item := range val {
			s.Items.defaultValue(item)
		}
	}
}

// normalize turns the float64 integers encoding/json decodes defaults to into int64, the form
// unstructured objects hold integers in.
func normalize(v any) any {
	switch val := v.(type) {
	case float64:
		if val == float64(int64(val)) {
			return int64(val)
		}
		return val
	case map[string]any:
		out := make(map[string]any, len(val))
		for k, x := range val {
			out[k] = normalize(x)
		}
		return out
	case []any:
		out := make([]any, len(val))
		for i, x := range val {
			out[i] = normalize(x)
		}
		return out
	}
	return v
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
