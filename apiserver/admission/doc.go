// Package admission decides what admission webhooks and ValidatingAdmissionPolicies say about
// a request (a write, or a CONNECT to a pod's exec, attach or portforward): which ones match
// it (rules, scope, namespace and object selectors, CEL match conditions), calling the webhooks (mutating with reinvocation, then validating), and
// evaluating the policies' CEL for each of their bindings and params.
//
// Policies are evaluated with object, oldObject, request, params, namespaceObject and
// variables, all untyped (dyn), and Kubernetes' authorizer and authorizer.requestResource,
// whose checks all answer allowed, since kplane does not authorize. The apiserver package compiles the configurations when they are written (422 for
// CEL that does not compile), keeps the compiled ones until one changes, and gives the
// policies their params from its own stores.
package admission
