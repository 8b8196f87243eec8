package endpointslice

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// hintMode is which routing hints a Service's ready endpoints carry.
type hintMode int

const (
	// noHints: cluster-wide routing; any hint present is removed.
	noHints hintMode = iota
	// zoneHints: each ready endpoint is hinted for its own zone (PreferClose, PreferSameZone).
	zoneHints
	// zoneAndNodeHints: also for its own node (PreferSameNode).
	zoneAndNodeHints
)

// hintModeFor returns the hints a Service asks for through spec.trafficDistribution.
//
// TODO: the service.kubernetes.io/topology-mode annotation (and its deprecated predecessor
// service.kubernetes.io/topology-aware-hints) set to Auto asks for hints spread by the CPU
// capacity of each zone's nodes. That needs a topology cache of node allocatable CPU per zone
// and is not implemented: such Services get no hints at all (which Kubernetes also falls back to
// whenever the zones are too unbalanced for hints). As in Kubernetes, the annotation takes
// precedence over trafficDistribution.
func hintModeFor(svc *corev1.Service) hintMode {
	if topologyModeAuto(svc.Annotations) {
		return noHints
	}
	td := svc.Spec.TrafficDistribution
	if td == nil {
		return noHints
	}
	switch *td {
	case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone:
		return zoneHints
	case corev1.ServiceTrafficDistributionPreferSameNode:
		return zoneAndNodeHints
	}
	return noHints // a value this version does not know
}

// topologyModeAuto reports whether the annotations ask for Auto topology hints; the deprecated
// annotation wins when both are present.
func topologyModeAuto(annotations map[string]string) bool {
	v, ok := annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	if !ok {
		v, ok = annotations[corev1.AnnotationTopologyMode]
	}
	return ok && (v == "Auto" || v == "auto")
}

// applyHints sets the hints of mode on every endpoint of the slices about to be created or
// updated, and returns the updates with a copy of each unchanged slice whose hints are wrong
// added (unchanged slices are the informer's and are never modified in place).
func applyHints(mode hintMode, create, update, unchanged []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	for _, s := range unchanged {
		if !hintsRight(mode, s) {
			update = append(update, s.DeepCopy())
		}
	}
	for _, s := range create {
		setHints(mode, s)
	}
	for _, s := range update {
		setHints(mode, s)
	}
	return update
}

// hintsRight reports whether every endpoint of s carries the hints mode asks for. With zone
// modes only ready endpoints are looked at: proxies route to the others only when nothing is
// ready, and then ignore hints.
func hintsRight(mode hintMode, s *discoveryv1.EndpointSlice) bool {
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if mode == noHints {
			if ep.Hints != nil {
				return false
			}
			continue
		}
		if !isReady(ep) {
			continue
		}
		var zones []discoveryv1.ForZone
		var nodes []discoveryv1.ForNode
		if ep.Hints != nil {
			zones, nodes = ep.Hints.ForZones, ep.Hints.ForNodes
		}
		if ep.Zone != nil {
			if len(zones) != 1 || zones[0].Name != *ep.Zone {
				return false
			}
		} else if len(zones) > 0 {
			return false
		}
		if ep.NodeName != nil && mode == zoneAndNodeHints {
			if len(nodes) != 1 || nodes[0].Name != *ep.NodeName {
				return false
			}
		} else if len(nodes) > 0 {
			return false
		}
	}
	return true
}

// setHints gives the endpoints of s (a slice owned by the caller) the hints of mode.
func setHints(mode hintMode, s *discoveryv1.EndpointSlice) {
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if mode == noHints {
			ep.Hints = nil
			continue
		}
		if !isReady(ep) {
			continue
		}
		var h discoveryv1.EndpointHints
		if ep.Zone != nil {
			h.ForZones = []discoveryv1.ForZone{{Name: *ep.Zone}}
		}
		if ep.NodeName != nil && mode == zoneAndNodeHints {
			h.ForNodes = []discoveryv1.ForNode{{Name: *ep.NodeName}}
		}
		ep.Hints = nil
		if h.ForZones != nil || h.ForNodes != nil {
			ep.Hints = &h
		}
	}
}

func isReady(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready != nil && *ep.Conditions.Ready
}
