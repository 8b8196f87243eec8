package endpointslice

import (
	"cmp"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// placement is what one port group needs written: slices to create and update (the caller's to
// modify further) and slices to delete (the informer's; never modify them), with how many
// endpoints were added and removed.
type placement struct {
	create, update, delete []*discoveryv1.EndpointSlice
	unchanged              []*discoveryv1.EndpointSlice
	added, removed         int
}

// placeGroup decides where the endpoints of one port group go, disturbing as few slices as
// possible, since every slice written is sent to every proxy:
//
//  1. Each existing slice keeps the wanted endpoints it holds (in their desired state). A slice
//     that lost an endpoint or holds one whose state changed is marked for update, or for
//     deletion when nothing is left; one whose Service labels are out of date is marked for
//     update as well. The others are unchanged.
//  2. The endpoints not placed yet fill the slices marked for update, fullest first, up to limit
//     endpoints each: those slices are written anyway.
//  3. What is left goes, when it all fits, into the one unchanged slice it would bring closest to
//     full (one more write instead of a new slice), otherwise into new slices of limit endpoints.
//
// existing are this Service's slices with these ports, owned by it. Endpoints not yet placed are
// taken in key order, so that the result does not depend on map iteration.
func placeGroup(svc *corev1.Service, at discoveryv1.AddressType, g *portGroup, existing []*discoveryv1.EndpointSlice, limit int) placement {
	var p placement
	want := maps.Clone(g.endpoints)

	// 1. Keep what existing slices hold and is still wanted.
	existing = slices.SortedFunc(slices.Values(existing), byName)
	for _, s := range existing {
		kept := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
		stateChanged := false
		for i := range s.Endpoints {
			k := endpointKey(&s.Endpoints[i])
			d, ok := want[k]
			if !ok {
				continue // not wanted, or already kept by an earlier slice
			}
			kept = append(kept, d)
			stateChanged = stateChanged || !sameEndpointState(&d, &s.Endpoints[i])
			delete(want, k)
		}
		labels, labelsChanged := sliceLabels(s.Labels, svc)
		switch {
		case stateChanged || len(kept) != len(s.Endpoints):
			p.removed += len(s.Endpoints) - len(kept)
			if len(kept) == 0 {
				p.delete = append(p.delete, s)
				continue
			}
			cp := s.DeepCopy()
			cp.Endpoints, cp.Labels = kept, labels
			p.update = append(p.update, cp)
		case labelsChanged:
			cp := s.DeepCopy()
			cp.Labels = labels
			p.update = append(p.update, cp)
		default:
			p.unchanged = append(p.unchanged, s)
		}
	}

	p.added = len(want)
	rest := make([]discoveryv1.Endpoint, 0, len(want))
	for _, k := range slices.Sorted(maps.Keys(want)) {
		rest = append(rest, want[k])
	}
	fill := func(s *discoveryv1.EndpointSlice) {
		n := min(len(rest), limit-len(s.Endpoints))
		if n > 0 {
			s.Endpoints = append(s.Endpoints, rest[:n]...)
			rest = rest[n:]
		}
	}

	// 2. Fill the slices that are written anyway, fullest first.
	if len(rest) > 0 && len(p.update) > 0 {
		byFullness := slices.Clone(p.update)
		slices.SortStableFunc(byFullness, func(a, b *discoveryv1.EndpointSlice) int {
			return cmp.Compare(len(b.Endpoints), len(a.Endpoints))
		})
		for _, s := range byFullness {
			fill(s)
		}
	}

	// 3. One unchanged slice that takes all the rest, else new slices.
	for len(rest) > 0 {
		var s *discoveryv1.EndpointSlice
		if len(rest) < limit {
			if i := closestToFull(p.unchanged, len(rest), limit); i >= 0 {
				s = p.unchanged[i].DeepCopy()
				p.unchanged = slices.Delete(p.unchanged, i, i+1)
				p.update = append(p.update, s)
			}
		}
		if s == nil {
			s = newSlice(svc, g.ports, at)
			p.create = append(p.create, s)
		}
		fill(s)
	}
	slices.SortFunc(p.update, byName)
	return p
}

// closestToFull returns the index of the slice that n more endpoints would bring closest to limit
// without going over, or -1 if none can take them. Ties go to the first (by name).
func closestToFull(ss []*discoveryv1.EndpointSlice, n, limit int) int {
	best, bestGap := -1, limit
	for i, s := range ss {
		gap := limit - (len(s.Endpoints) + n)
		if gap >= 0 && gap < bestGap {
			best, bestGap = i, gap
			if gap == 0 {
				break
			}
		}
	}
	return best
}

func byName(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) }
