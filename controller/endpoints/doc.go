// Package endpoints is the endpoints controller of the controller manager: it keeps one
// core/v1 Endpoints object per Service that has a selector, listing the IPs and ports of the
// pods the selector picks, as kube-controller-manager v1.36 does.
//
// The package is split the way a state machine and its driver are split. Everything that
// decides what an Endpoints object should hold is pure: which pods count and with which
// address (address.go), the per-pod subsets (subsets.go), their canonical packing
// (repack.go), truncation at 1000 addresses (truncate.go), labels, annotations and the
// "does this need a write?" decision (object.go), the trigger-time and stale-cache
// bookkeeping (triggertime.go, stale.go), which services a pod event concerns
// (podevents.go) and logging each problem once (problems.go). None of it touches the
// network, so it is tested table by table without a server. controller.go holds the
// controller's settings (Options) and wires informers to it through a controller.Loop, and
// sync.go performs the one sync of one service key, reading listers and writing the API
// server.
package endpoints
