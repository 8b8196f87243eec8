package endpoints

import (
	"math"

	corev1 "k8s.io/api/core/v1"
)

// maxAddresses is how many addresses (ready and not ready, over all subsets) one Endpoints
// object holds at most; past it the object is truncated and annotated. Larger services are
// the EndpointSlice API's job.
const maxAddresses = 1000

// countAddresses returns the ready and not-ready address counts over subsets.
func countAddresses(subsets []corev1.EndpointSubset) (ready, notReady int) {
	for _, s := range subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	return ready, notReady
}

// truncateSubsets cuts subsets down to limit addresses, reporting whether it cut anything.
//
// Ready addresses go first. If they fit, all of them stay and the room left is shared among
// the subsets' not-ready addresses; otherwise the limit is shared among the ready addresses
// and no not-ready address stays. Each subset gets a share proportional to what it had,
// rounded up, so the subsets met last may get less than their share once the room runs out;
// it keeps the first addresses of its (sorted) list. A subset left with no address at all is
// dropped: the API rejects such a subset.
//
// The input is not modified; the result shares address lists with it.
func truncateSubsets(subsets []corev1.EndpointSubset, limit int) ([]corev1.EndpointSubset, bool) {
	ready, notReady := countAddresses(subsets)
	if ready+notReady <= limit {
		return subsets, false
	}
	cutReady := ready > limit
	total, room := notReady, limit-ready
	if cutReady {
		total, room = ready, limit
	}
	left := room
	out := make([]corev1.EndpointSubset, 0, len(subsets))
	for _, s := range subsets {
		n := len(s.NotReadyAddresses)
		if cutReady {
			n = len(s.Addresses)
		}
		// The float expression is Kubernetes' own, kept so that shares match exactly.
		share := min(int(math.Ceil(float64(n)/float64(total)*float64(room))), left)
		if cutReady {
			s.Addresses = s.Addresses[:min(share, len(s.Addresses))]
			s.NotReadyAddresses = nil
			left -= len(s.Addresses)
		} else {
			s.NotReadyAddresses = s.NotReadyAddresses[:min(share, len(s.NotReadyAddresses))]
			left -= len(s.NotReadyAddresses)
		}
		if len(s.Addresses) == 0 && len(s.NotReadyAddresses) == 0 {
			continue
		}
		out = append(out, s)
	}
	return out, true
}
