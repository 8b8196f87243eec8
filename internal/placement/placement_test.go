package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestTolerates(t *testing.T) {
	taint := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name string
		tol  corev1.Toleration
		want bool
	}{
		{"equal key, value and effect", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}, true},
		{"empty operator means Equal", corev1.Toleration{Key: "dedicated", Value: "gpu"}, true},
		{"equal, other value", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cpu"}, false},
		{"equal, empty value", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual}, false},
		{"exists, any value", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}, true},
		{"exists, other key", corev1.Toleration{Key: "other", Operator: corev1.TolerationOpExists}, false},
		{"empty key with exists matches every taint", corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{"empty key with equal matches nothing", corev1.Toleration{Operator: corev1.TolerationOpEqual, Value: "gpu"}, false},
		{"empty effect matches every effect", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}, true},
		{"other effect", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{"exists for every key, other effect", corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectPreferNoSchedule}, false},
		{"numeric operators are not supported", corev1.Toleration{Key: "dedicated", Operator: "Gt", Value: "1"}, false},
	} {
		if got := Tolerates(tc.tol, taint); got != tc.want {
			t.Errorf("%s: Tolerates(%+v) = %v, want %v", tc.name, tc.tol, got, tc.want)
		}
	}
}
