// Package endpointslice is the EndpointSlice controller of the controller manager: for every
// Service with a selector it keeps discovery.k8s.io/v1 EndpointSlices listing the Service's
// pods, which is what service proxies read.
//
// The package has three layers, each in its own files:
//
//   - Desired state (endpoint.go, keys.go): which pods count, the Endpoint each one becomes for
//     an address type, and the port group it belongs to. Pure functions of the Service, its pods
//     and a node lookup.
//   - Reconciliation (reconciler.go, placement.go, slicemeta.go, hints.go): from the desired
//     endpoints and the existing slices, the slices to create, update and delete, changing as
//     few slices as possible. A pure function returning a plan; it never talks to a server.
//   - The controller (controller.go, handlers.go, sync.go): informers and their event handlers
//     feed a rate-limited queue of Service keys; a sync reads the listers, asks the reconciler
//     for a plan and writes it. Two small state machines keep what a sync needs to remember
//     between runs: the slice tracker (tracker.go), which tells a stale informer cache from a
//     current one, and the trigger-time tracker (triggertime.go).
//
// Behaviour follows kube-controller-manager v1.36; where it differs on purpose the comment at
// the spot says so.
package endpointslice
