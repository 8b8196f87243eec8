package customresource

import (
	"fmt"
	"strconv"
	"strings"
)

// Path is a compiled JSONPath of the kind CRDs use for printer columns, selectable fields and
// the scale subresource: fields (.a, ['a']), indexes ([0], [-1]), all items ([*]) and filters
// comparing a field with a literal ([?(@.type=="Ready")], with == or !=).
type Path struct {
	src   string
	steps []step
}

type step struct {
	field  string // a field of an object
	index  *int   // an item of a list
	all    bool   // every item of a list
	filter *filter
}

type filter struct {
	path  []string // fields under @
	equal bool     // == (else !=)
	value any      // string, float64 or bool
}

// ParsePath compiles a JSONPath such as ".status.conditions[?(@.type==\"Ready\")].status".
func ParsePath(src string) (*Path, error) {
	s := strings.TrimSpace(src)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	s = strings.TrimPrefix(s, "$")
	p := &Path{src: src}
	for len(s) > 0 {
		switch s[0] {
		case '.':
			s = s[1:]
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				if len(s) == 0 {
					return p, nil
				}
				return nil, fmt.Errorf("empty field name in %q", src)
			}
			p.steps = append(p.steps, step{field: s[:end]})
			s = s[end:]
		case '[':
			end := matchingBracket(s)
			if end < 0 {
				return nil, fmt.Errorf("unterminated [ in %q", src)
			}
			inner := strings.TrimSpace(s[1:end])
			s = s[end+1:]
			st, err := parseBracket(inner)
			if err != nil {
				return nil, fmt.Errorf("%s in %q", err, src)
			}
			p.steps = append(p.steps, st)
		default:
			return nil, fmt.Errorf("unexpected %q in %q", s[0], src)
		}
	}
	return p, nil
}

func matchingBracket(s string) int {
	depth, quote := 0, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '[':
			depth++
		case c == ']':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func parseBracket(inner string) (step, error) {
	switch {
	case inner == "*":
		return step{all: true}, nil
	case strings.HasPrefix(inner, "'") || strings.HasPrefix(inner, `"`):
		name, err := unquote(inner)
		return step{field: name}, err
	case strings.HasPrefix(inner, "?(") && strings.HasSuffix(inner, ")"):
		expr := strings.TrimSpace(inner[2 : len(inner)-1])
		op, equal := "==", true
		i := strings.Index(expr, "==")
		if i < 0 {
			op, equal, i = "!=", false, strings.Index(expr, "!=")
		}
		if i < 0 || !strings.HasPrefix(expr, "@.") {
			return step{}, fmt.Errorf("unsupported filter %q", inner)
		}
		lhs, rhs := strings.TrimSpace(expr[2:i]), strings.TrimSpace(expr[i+len(op):])
		f := &filter{path: strings.Split(lhs, "."), equal: equal}
		switch {
		case strings.HasPrefix(rhs, "'") || strings.HasPrefix(rhs, `"`):
			v, err := unquote(rhs)
			if err != nil {
				return step{}, err
			}
			f.value = v
		case rhs == "true" || rhs == "false":
			f.value = rhs == "true"
		default:
			n, err := strconv.ParseFloat(rhs, 64)
			if err != nil {
				return step{}, fmt.Errorf("unsupported literal %q", rhs)
			}
			f.value = n
		}
		return step{filter: f}, nil
	default:
		n, err := strconv.Atoi(inner)
		if err != nil {
			return step{}, fmt.Errorf("unsupported index %q", inner)
		}
		return step{index: &n}, nil
	}
}

func unquote(s string) (string, error) {
	if len(s) < 2 || s[0] != s[len(s)-1] {
		return "", fmt.Errorf("unterminated string %s", s)
	}
	return s[1 : len(s)-1], nil
}

// Find returns the values the path selects in v, in order.
func (p *Path) Find(v any) []any {
	cur := []any{v}
	for _, st := range p.steps {
		var next []any
		for _, c := range cur {
			switch {
			case st.field != "":
				if m, ok := c.(map[string]any); ok {
					if x, ok := m[st.field]; ok {
						next = append(next, x)
					}
				}
			case st.index != nil:
				if l, ok := c.([]any); ok {
					i := *st.index
					if i < 0 {
						i += len(l)
					}
					if i >= 0 && i < len(l) {
						next = append(next, l[i])
					}
				}
			case st.all:
				if l, ok := c.([]any); ok {
					next = append(next, l...)
				}
			case st.filter != nil:
				if l, ok := c.([]any); ok {
					for _, item := range l {
						if st.filter.matches(item) {
							next = append(next, item)
						}
					}
				}
			}
		}
		cur = next
	}
	return cur
}

// First returns the first value the path selects, if any.
func (p *Path) First(v any) (any, bool) {
	found := p.Find(v)
	if len(found) == 0 {
		return nil, false
	}
	return found[0], true
}

func (f *filter) matches(item any) bool {
	var v any = item
	for _, k := range f.path {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[k]; !ok {
			return false
		}
	}
	eq := false
	switch want := f.value.(type) {
	case float64:
		switch n := v.(type) {
		case int64:
			eq = float64(n) == want
		case float64:
			eq = n == want
		}
	default:
		eq = v == f.value
	}
	return eq == f.equal
}

// String returns the path as written.
func (p *Path) String() string { return p.src }
