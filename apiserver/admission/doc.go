// Package admission decides what admission webhooks and admission policies say about a
// request (a write, or a CONNECT to a pod's exec, attach or portforward): which ones match it
// (rules, scope, namespace and object selectors, CEL match
// conditions, the version a matchPolicy Equivalent rule names), calling the webhooks, and
// evaluating the policies' CEL for each of their bindings and params.
//
// The mutating phase (Request.Mutate) runs the MutatingAdmissionPolicies, then the mutating
// webhooks, each on the object the ones before it left, then once more those that asked to be
// reinvoked and ran before the last change. The validating phase runs the
// ValidatingAdmissionPolicies, then the validating webhooks.
//
// Policies are evaluated with object, oldObject, request, params, namespaceObject and
// variables, all untyped (dyn), and Kubernetes' authorizer and authorizer.requestResource,
// whose checks all answer allowed, since kplane does not authorize. TypeCheck (typecheck.go)
// compiles a ValidatingAdmissionPolicy's validations again with those variables typed by the
// schemas of the kinds it names, for its status.typeChecking warnings; the warnings change
// nothing of how the policy is evaluated. Mutating policies build
// their results with the Object and JSONPatch types of celobjects.go; an apply configuration
// is merged by a Merger the apiserver gives (its field managers know each kind's list and map
// semantics). The apiserver package compiles the configurations when they are written (422 for
// CEL that does not compile, has the wrong type, or costs more than the budget even on an
// empty object), keeps the compiled ones until one changes, gives the policies their
// params from its own stores, and writes the type checking of each policy's generation to its
// status.
package admission
