package endpoints

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// block makes n distinct addresses, named prefix-0 … prefix-(n-1), already in sorted order.
func block(prefix string, n int) []corev1.EndpointAddress {
	out := make([]corev1.EndpointAddress, n)
	for i := range out {
		out[i] = corev1.EndpointAddress{IP: fmt.Sprintf("10.%d.%d.%d", len(prefix), i/256, i%256), TargetRef: &corev1.ObjectReference{Name: fmt.Sprintf("%s-%d", prefix, i)}}
	}
	return out
}

func TestTruncateSubsets(t *testing.T) {
	type shape struct{ ready, notReady int }
	tests := []struct {
		name      string
		in        []shape
		want      []shape // per subset kept
		truncated bool
	}{
		{"under the limit", []shape{{400, 100}, {300, 0}}, []shape{{400, 100}, {300, 0}}, false},
		{"exactly at the limit", []shape{{600, 400}}, []shape{{600, 400}}, false},
		{"one over: not ready goes first", []shape{{600, 401}}, []shape{{600, 400}}, true},
		{"ready fit: the rest shared among not ready, rounded up", []shape{{500, 150}, {200, 150}, {0, 300}},
			// room 300 over 600 not ready: 75, 75, 150
			[]shape{{500, 75}, {200, 75}, {0, 150}}, true},
		{"rounding up leaves less for the last subset", []shape{{0, 1}, {0, 1}, {0, 1}, {997, 1}},
			// room 3 over 4: ceil(0.75) = 1 each until the room runs out
			[]shape{{0, 1}, {0, 1}, {0, 1}, {997, 0}}, true},
		{"ready exactly at the limit: no not ready left", []shape{{1000, 5}, {0, 7}},
			// the second subset is left empty and dropped
			[]shape{{1000, 0}}, true},
		{"too many ready: shared proportionally, not ready all dropped", []shape{{800, 50}, {400, 0}},
			// 800/1200·1000 = 666.67 → 667; then min(334, 333)
			[]shape{{667, 0}, {333, 0}}, true},
		{"too many ready, a not-ready-only subset disappears", []shape{{0, 30}, {1500, 0}},
			[]shape{{1000, 0}}, true},
		{"many subsets, ready over", []shape{{300, 0}, {300, 0}, {300, 0}, {300, 0}},
			// 250 each
			[]shape{{250, 0}, {250, 0}, {250, 0}, {250, 0}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in []corev1.EndpointSubset
			for i, s := range tt.in {
				in = append(in, corev1.EndpointSubset{
					Addresses:         block(fmt.Sprintf("r%d", i), s.ready),
					NotReadyAddresses: block(fmt.Sprintf("n%d", i), s.notReady),
					Ports:             eports(eport("p", int32(i+1))),
				})
			}
			before := dump(in)
			got, truncated := truncateSubsets(in, maxAddresses)
			if truncated != tt.truncated {
				t.Errorf("truncated = %v, want %v", truncated, tt.truncated)
			}
			var shapes []shape
			for _, s := range got {
				shapes = append(shapes, shape{len(s.Addresses), len(s.NotReadyAddresses)})
			}
			if fmt.Sprint(shapes) != fmt.Sprint(tt.want) {
				t.Errorf("kept %v, want %v", shapes, tt.want)
			}
			ready, notReady := countAddresses(got)
			if ready+notReady > maxAddresses {
				t.Errorf("%d addresses kept, more than %d", ready+notReady, maxAddresses)
			}
			// Each subset keeps the head of its sorted lists.
			for _, s := range got {
				for _, list := range [][]corev1.EndpointAddress{s.Addresses, s.NotReadyAddresses} {
					for j, a := range list {
						if want := fmt.Sprintf("-%d", j); a.TargetRef.Name[len(a.TargetRef.Name)-len(want):] != want {
							t.Fatalf("kept %s at position %d, want the first addresses", a.TargetRef.Name, j)
						}
					}
				}
			}
			if dump(in) != before {
				t.Error("input was modified")
			}
		})
	}
}
