package endpointslice

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// reconcileInput is everything one reconciliation of one Service looks at.
type reconcileInput struct {
	service *corev1.Service
	// pods are the pods the Service's selector matches, in any state.
	pods []*corev1.Pod
	// slices are the Service's slices managed by this controller, none of them being deleted.
	slices []*discoveryv1.EndpointSlice
	nodes  nodeLookup
	// maxEndpointsPerSlice caps the endpoints of a slice this reconciliation fills.
	maxEndpointsPerSlice int
	// triggerTime is recorded on every slice written (zero: the annotation is removed).
	triggerTime time.Time
}

// plan is what a reconciliation decided: the slices to create, update and delete, to be written
// in that order (creates first, so that endpoints moving between slices are never missing).
// create and update hold objects owned by the plan, ready to send; delete holds the informer's
// objects, which must not be modified.
type plan struct {
	create, update, delete []*discoveryv1.EndpointSlice
	// missingNodes are pods left out because their Node is not known; the sync must fail after
	// writing the rest, so that it is retried.
	missingNodes []missingNode
	// problems is the bad input met, by cause, to be logged once.
	problems problems
	stats    planStats
}

// planStats feeds the metrics.
type planStats struct {
	added, removed int // endpoints added to and removed from slices
	endpoints      int // desired endpoints, every address type
	desiredSlices  int // slices a perfect packing would need
	slices         int // slices once the plan is written
}

// empty reports whether the plan writes nothing.
func (p *plan) empty() bool { return len(p.create)+len(p.update)+len(p.delete) == 0 }

// reconcile computes the plan that brings a Service's slices to what its pods ask for. It is a
// pure function: it reads its input (never modifying it) and nothing else.
func reconcile(in reconcileInput) plan {
	svc := in.service
	limit := max(in.maxEndpointsPerSlice, 1)
	p := plan{problems: problems{}}
	reservedLabelProblems(svc, p.problems)

	types := addressTypesFor(svc)
	byType := map[discoveryv1.AddressType][]*discoveryv1.EndpointSlice{}
	var otherTypes []*discoveryv1.EndpointSlice
	for _, s := range in.slices {
		if slices.Contains(types, s.AddressType) {
			byType[s.AddressType] = append(byType[s.AddressType], s)
		} else {
			// The Service no longer has this family, or the slice is of a type this controller
			// stopped writing long ago (FQDN, the legacy IP).
			otherTypes = append(otherTypes, s)
		}
	}

	seenMissing := map[missingNode]bool{}
	for _, at := range types {
		groups, missing := desiredGroups(svc, in.pods, in.nodes, at, p.problems)
		for _, m := range missing {
			if !seenMissing[m] {
				seenMissing[m] = true
				p.missingNodes = append(p.missingNodes, m)
			}
		}
		create, update, del := reconcileType(svc, at, groups, byType[at], limit, &p.stats)
		p.create = append(p.create, create...)
		p.update = append(p.update, update...)
		p.delete = append(p.delete, del...)
	}
	slices.SortFunc(otherTypes, byName)
	p.delete = append(p.delete, otherTypes...)

	if svc.DeletionTimestamp != nil {
		// The garbage collector is deleting the Service's slices: a new one would race with it
		// and outlive the Service.
		p.create = nil
	}
	for _, s := range p.create {
		setTriggerTime(s, in.triggerTime)
	}
	for _, s := range p.update {
		setTriggerTime(s, in.triggerTime)
	}
	return p
}

// reconcileType plans the slices of one address type: placement per port group, deletion of the
// slices of port groups nobody wants any more and of slices another Service owns, a placeholder
// when nothing is left, hints, and finally the reuse of slices due for deletion for pending
// creates.
func reconcileType(svc *corev1.Service, at discoveryv1.AddressType, groups map[string]*portGroup,
	existing []*discoveryv1.EndpointSlice, limit int, st *planStats) (create, update, del []*discoveryv1.EndpointSlice) {
	existing = slices.SortedFunc(slices.Values(existing), byName)
	byPorts := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		if ownedBy(s, svc) {
			k := portKey(s.Ports)
			byPorts[k] = append(byPorts[k], s)
		} else {
			// Left by an earlier Service of the same name, or its owner reference was removed.
			del = append(del, s)
		}
	}

	var unchanged []*discoveryv1.EndpointSlice
	desiredSlices := 0
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		g := groups[k]
		pl := placeGroup(svc, at, g, byPorts[k], limit)
		create = append(create, pl.create...)
		update = append(update, pl.update...)
		del = append(del, pl.delete...)
		unchanged = append(unchanged, pl.unchanged...)
		st.added += pl.added
		st.removed += pl.removed
		st.endpoints += len(g.endpoints)
		desiredSlices += (len(g.endpoints) + limit - 1) / limit
	}
	for _, k := range slices.Sorted(maps.Keys(byPorts)) {
		if groups[k] == nil {
			del = append(del, byPorts[k]...)
		}
	}

	if len(del) == len(existing) && len(create) == 0 {
		ph := placeholderFor(svc, at)
		if len(del) == 1 && samePlaceholder(del[0], ph) {
			del = nil // it is there already: keep it rather than delete and recreate it
		} else {
			create = append(create, ph)
		}
	}
	st.desiredSlices += max(desiredSlices, 1)

	update = applyHints(hintModeFor(svc), create, update, unchanged)
	create, update, del = reuseDeleted(svc, at, create, update, del)
	st.slices += len(existing) + len(create) - len(del)
	return create, update, del
}

// reuseDeleted turns pending creates into updates of slices due for deletion: one write instead
// of two, and one object fewer for the proxies to add and remove. Only the Service's own slices
// of the same address type are reused (the address type cannot change, and a slice of an older
// Service of the same name is the garbage collector's).
func reuseDeleted(svc *corev1.Service, at discoveryv1.AddressType, create, update, del []*discoveryv1.EndpointSlice) (c, u, d []*discoveryv1.EndpointSlice) {
	var keep []*discoveryv1.EndpointSlice
	for _, old := range del {
		if len(create) == 0 || old.AddressType != at || !ownedBy(old, svc) {
			keep = append(keep, old)
			continue
		}
		s := create[len(create)-1]
		create = create[:len(create)-1]
		s.Name = old.Name
		// Kubernetes writes this update unconditionally. Carrying the resourceVersion makes it
		// fail with a conflict, and be retried, when the informer's copy was stale.
		s.ResourceVersion = old.ResourceVersion
		update = append(update, s)
	}
	return create, update, keep
}
