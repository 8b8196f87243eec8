package customresource

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
)

// Kubernetes' named-format and semantic-version libraries, with its names, results and
// messages.

// formatType is Kubernetes' kubernetes.NamedFormat: a string format a rule checks values
// against with format.<name>().validate(s).
var formatType = cel.ObjectType("kubernetes.NamedFormat")

type namedFormat struct {
	name     string
	validate func(string) []string
	// maxRegexSize is what checking a string against the format costs per character, in
	// regular-expression length, as Kubernetes prices it.
	maxRegexSize int
}

func (f *namedFormat) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from 'Format' to '%v'", t)
}

func (f *namedFormat) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case formatType:
		return f
	case types.TypeType:
		return formatType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", formatType, t)
}

func (f *namedFormat) Equal(other ref.Val) ref.Val {
	o, ok := other.(*namedFormat)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(f.name == o.name)
}

func (f *namedFormat) Type() ref.Type { return formatType }
func (f *namedFormat) Value() any     { return f }

// Kubernetes' cost figures for the formats not checked by a name regex.
const (
	// maxFormatNameSize bounds the cost of comparing two formats.
	maxFormatNameSize = 64
	// maxFormatRegexSize is the largest maxRegexSize of any format, what validate's
	// estimate assumes.
	maxFormatRegexSize = 128
	base64RegexSize    = 84
	urlRegexSize       = 1103
)

// strfmtCheck validates s against one of kube-openapi's formats, the registry Kubernetes'
// format library checks uuid, byte, date and datetime with.
func strfmtCheck(name, msg string) func(string) []string {
	return func(s string) []string {
		if !strfmt.Default.Validates(name, s) {
			return []string{msg}
		}
		return nil
	}
}

// namedFormats are the formats format.named(name) knows, by name; each is also the
// zero-argument function format.<name>().
var namedFormats = map[string]*namedFormat{
	"dns1123Label":           {"DNS1123Label", func(s string) []string { return apimachineryvalidation.NameIsDNSLabel(s, false) }, 30},
	"dns1123Subdomain":       {"DNS1123Subdomain", func(s string) []string { return apimachineryvalidation.NameIsDNSSubdomain(s, false) }, 60},
	"dns1035Label":           {"DNS1035Label", func(s string) []string { return apimachineryvalidation.NameIsDNS1035Label(s, false) }, 30},
	"qualifiedName":          {"QualifiedName", validation.IsQualifiedName, 60},
	"dns1123LabelPrefix":     {"DNS1123LabelPrefix", func(s string) []string { return apimachineryvalidation.NameIsDNSLabel(s, true) }, 30},
	"dns1123SubdomainPrefix": {"DNS1123SubdomainPrefix", func(s string) []string { return apimachineryvalidation.NameIsDNSSubdomain(s, true) }, 60},
	"dns1035LabelPrefix":     {"DNS1035LabelPrefix", func(s string) []string { return apimachineryvalidation.NameIsDNS1035Label(s, true) }, 30},
	"labelValue":             {"LabelValue", validation.IsValidLabelValue, 40},
	"uri": {"URI", func(s string) []string {
		if _, err := url.ParseRequestURI(s); err != nil {
			return []string{err.Error()}
		}
		return nil
	}, urlRegexSize},
	"uuid":     {"uuid", strfmtCheck("uuid", "does not match the UUID format"), len(strfmt.UUIDPattern)},
	"byte":     {"byte", strfmtCheck("byte", "invalid base64"), base64RegexSize},
	"date":     {"date", strfmtCheck("date", "invalid date"), len(strfmt.DateTimePattern)},
	"datetime": {"datetime", strfmtCheck("datetime", "invalid datetime"), len(strfmt.DateTimePattern)},
}

// kubeFormat: format.named(name), format.<name>() and format.validate(s), which is
// optional.none() for a valid s and the list of what is wrong otherwise.
type kubeFormat struct{}

func (kubeFormat) LibraryName() string { return "kplane.format" }

func (kubeFormat) CompileOptions() []cel.EnvOption {
	opts := []cel.EnvOption{
		cel.Function("validate", cel.MemberOverload("format-validate", []*cel.Type{formatType, cel.StringType}, cel.OptionalType(cel.ListType(cel.StringType)),
			cel.BinaryBinding(func(f, s ref.Val) ref.Val {
				nf, ok := f.(*namedFormat)
				if !ok {
					return types.MaybeNoSuchOverloadErr(f)
				}
				str, ok := s.(types.String)
				if !ok {
					return types.MaybeNoSuchOverloadErr(s)
				}
				if errs := nf.validate(string(str)); len(errs) > 0 {
					return types.OptionalOf(types.NewStringList(types.DefaultTypeAdapter, errs))
				}
				return types.OptionalNone
			}))),
		cel.Function("format.named", cel.Overload("format-named", []*cel.Type{cel.StringType}, cel.OptionalType(formatType),
			cel.UnaryBinding(func(name ref.Val) ref.Val {
				s, ok := name.(types.String)
				if !ok {
					return types.MaybeNoSuchOverloadErr(name)
				}
				if f, ok := namedFormats[string(s)]; ok {
					return types.OptionalOf(f)
				}
				return types.OptionalNone
			}))),
	}
	for name, f := range namedFormats {
		fn := "format." + name
		opts = append(opts, cel.Function(fn, cel.Overload(fn, nil, formatType, cel.FunctionBinding(func(...ref.Val) ref.Val { return f }))))
	}
	return opts
}

func (kubeFormat) ProgramOptions() []cel.ProgramOption { return nil }

// semverType is Kubernetes' kubernetes.Semver.
var semverType = cel.ObjectType("kubernetes.Semver")

type semverValue struct{ v semver.Version }

func (s semverValue) ConvertToNative(t reflect.Type) (any, error) {
	switch {
	case reflect.TypeOf(s.v).AssignableTo(t):
		return s.v, nil
	case reflect.TypeOf("").AssignableTo(t):
		return s.v.String(), nil
	}
	return nil, fmt.Errorf("type conversion error from 'Semver' to '%v'", t)
}

func (s semverValue) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case semverType:
		return s
	case types.TypeType:
		return semverType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", semverType, t)
}

func (s semverValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(semverValue)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(s.v.EQ(o.v))
}

func (s semverValue) Type() ref.Type { return semverType }
func (s semverValue) Value() any     { return s.v }

// parseSemver reads a semantic version strictly, or with normalize as Kubernetes' semver
// library version 1 does: a "v" prefix, leading zeros and a missing minor or patch allowed.
func parseSemver(s string, normalize bool) (semver.Version, error) {
	if !normalize {
		return semver.Parse(s)
	}
	parts := strings.SplitN(strings.TrimPrefix(s, "v"), ".", 3)
	for i, p := range parts {
		if len(p) < 2 {
			continue
		}
		p = strings.TrimLeft(p, "0")
		if p == "" || p[0] < '0' || p[0] > '9' {
			p = "0" + p
		}
		parts[i] = p
	}
	if len(parts) < 3 {
		if strings.ContainsAny(parts[len(parts)-1], "+-") {
			return semver.Version{}, errors.New("short version cannot contain PreRelease/Build meta data")
		}
		for len(parts) < 3 {
			parts = append(parts, "0")
		}
	}
	return semver.Parse(strings.Join(parts, "."))
}

// semverArgs binds a function of a version string and whether to normalize it.
func semverArgs(f func(string, bool) ref.Val) (unary, binary cel.OverloadOpt) {
	call := func(s, normalize ref.Val) ref.Val {
		str, ok := s.(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(s)
		}
		n, ok := normalize.(types.Bool)
		if !ok {
			return types.MaybeNoSuchOverloadErr(s)
		}
		return f(string(str), bool(n))
	}
	return cel.UnaryBinding(func(s ref.Val) ref.Val { return call(s, types.False) }), cel.BinaryBinding(call)
}

func semverOf(f func(semver.Version) ref.Val) cel.OverloadOpt {
	return cel.UnaryBinding(func(v ref.Val) ref.Val {
		s, ok := v.(semverValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		return f(s.v)
	})
}

func semverPair(f func(a, b semver.Version) ref.Val) cel.OverloadOpt {
	return cel.BinaryBinding(func(x, y ref.Val) ref.Val {
		a, ok := x.(semverValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(x)
		}
		b, ok := y.(semverValue)
		if !ok {
			return types.MaybeNoSuchOverloadErr(x)
		}
		return f(a.v, b.v)
	})
}

// kubeSemver: semver(s[, normalize]), isSemver(s[, normalize]) and the version methods
// (Kubernetes' semver library at version 1, the one v1.36's CRD rules get).
type kubeSemver struct{}

func (kubeSemver) LibraryName() string { return "kplane.semver" }

func (kubeSemver) CompileOptions() []cel.EnvOption {
	toSemver, toSemverNormalized := semverArgs(func(s string, normalize bool) ref.Val {
		v, err := parseSemver(s, normalize)
		if err != nil {
			return types.WrapErr(err)
		}
		return semverValue{v}
	})
	isSemver, isSemverNormalized := semverArgs(func(s string, normalize bool) ref.Val {
		_, err := parseSemver(s, normalize)
		return types.Bool(err == nil)
	})
	s1, ss := []*cel.Type{semverType}, []*cel.Type{semverType, semverType}
	part := func(name string, get func(semver.Version) uint64) cel.EnvOption {
		return cel.Function(name, cel.MemberOverload("semver_"+name, s1, cel.IntType, semverOf(func(v semver.Version) ref.Val { return types.Int(get(v)) })))
	}
	return []cel.EnvOption{
		cel.Function("semver",
			cel.Overload("string_to_semver", []*cel.Type{cel.StringType}, semverType, toSemver),
			cel.Overload("string_bool_to_semver", []*cel.Type{cel.StringType, cel.BoolType}, semverType, toSemverNormalized)),
		cel.Function("isSemver",
			cel.Overload("is_semver_string", []*cel.Type{cel.StringType}, cel.BoolType, isSemver),
			cel.Overload("is_semver_string_bool", []*cel.Type{cel.StringType, cel.BoolType}, cel.BoolType, isSemverNormalized)),
		cel.Function("isGreaterThan", cel.MemberOverload("semver_is_greater_than", ss, cel.BoolType,
			semverPair(func(a, b semver.Version) ref.Val { return types.Bool(a.Compare(b) == 1) }))),
		cel.Function("isLessThan", cel.MemberOverload("semver_is_less_than", ss, cel.BoolType,
			semverPair(func(a, b semver.Version) ref.Val { return types.Bool(a.Compare(b) == -1) }))),
		cel.Function("compareTo", cel.MemberOverload("semver_compare_to", ss, cel.IntType,
			semverPair(func(a, b semver.Version) ref.Val { return types.Int(a.Compare(b)) }))),
		part("major", func(v semver.Version) uint64 { return v.Major }),
		part("minor", func(v semver.Version) uint64 { return v.Minor }),
		part("patch", func(v semver.Version) uint64 { return v.Patch }),
	}
}

func (kubeSemver) ProgramOptions() []cel.ProgramOption { return nil }
