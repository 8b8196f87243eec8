// Package customresource serves CustomResourceDefinitions (apiextensions.k8s.io/v1) and the
// custom resources they define, as Kubernetes v1.36's apiextensions-apiserver does:
//
//   - CRDs is the registry definition of the CRD objects themselves: defaults, and the
//     validation of names, versions, subresources, printer columns, selectable fields,
//     conversion and of each version's schema, which must be structural (ValidateSchema).
//   - Compile turns a version's openAPIV3Schema into a Schema that validates (types, formats,
//     enums, patterns, bounds, list types and map keys, int-or-string, embedded resources),
//     prunes unknown fields and fills defaults; messages read as kube-apiserver's.
//   - x-kubernetes-validations rules are CEL expressions (github.com/google/cel-go, the
//     version Kubernetes v1.36 uses): ValidateCRD compiles them against CEL types declared
//     from the schema and refuses those that do not compile or whose estimated cost is over
//     Kubernetes' limits; each Resource keeps its compiled rules and runs them on writes,
//     with oldSelf bound to the correlated old value on updates (cel.go, celtypes.go,
//     celcrd.go; Kubernetes' function libraries in cellib.go for lists, regular expressions
//     and quantities, celnet.go for URLs, IPs and CIDRs, celformat.go for named formats and
//     semantic versions). TypeDeclarations lends the same type declarations to admission
//     policies' type checking, and CompileOpenAPI makes a Schema of any kind's OpenAPI v3
//     schema (references resolved), built-in kinds included.
//   - NewResource makes the registry.Strategy of one served version: unstructured objects,
//     the status/spec split of the status subresource, generation, printer columns as table
//     rows, selectable fields and the scale subresource's paths.
//   - Converter converts objects between a CRD's versions: by their apiVersion (strategy
//     None), or through the CRD's conversion webhook (ConversionReview v1 or v1beta1, every
//     object of a list in one review, the answer checked as kube-apiserver checks it). It is
//     the package's only I/O.
//
// The apiserver (crd.go there) watches CRDs, accepts their names, marks them Established and
// adds or removes the served resources at runtime: one store per CRD holds its objects in the
// version each was written in, and every served version reads and writes it through the
// Converter (storage.Converted).
package customresource
