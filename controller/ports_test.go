package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestFindPort(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "stats", ContainerPort: 7070, Protocol: corev1.ProtocolUDP},
		}}},
		InitContainers: []corev1.Container{
			{Name: "setup", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 1, Protocol: corev1.ProtocolTCP}}},
			{Name: "sidecar", RestartPolicy: &always, Ports: []corev1.ContainerPort{
				{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
				{Name: "http", ContainerPort: 1111, Protocol: corev1.ProtocolTCP},
				{Name: "stats", ContainerPort: 7071, Protocol: corev1.ProtocolTCP},
			}},
		},
	}}
	for _, tc := range []struct {
		target   intstr.IntOrString
		protocol corev1.Protocol
		want     int32
		found    bool
	}{
		{intstr.FromInt32(7000), corev1.ProtocolTCP, 7000, true},
		{intstr.FromString("http"), corev1.ProtocolTCP, 8080, true}, // regular containers first
		{intstr.FromString("dns"), corev1.ProtocolUDP, 53, true},
		{intstr.FromString("dns"), corev1.ProtocolTCP, 0, false}, // the protocol must match
		{intstr.FromString("metrics"), corev1.ProtocolTCP, 9090, true},
		{intstr.FromString("stats"), corev1.ProtocolTCP, 7071, true}, // the sidecar's has the protocol
		{intstr.FromString("setup"), corev1.ProtocolTCP, 0, false},   // not a sidecar
		{intstr.FromString("nope"), corev1.ProtocolTCP, 0, false},
	} {
		got, found := FindPort(pod, &corev1.ServicePort{TargetPort: tc.target, Protocol: tc.protocol})
		if got != tc.want || found != tc.found {
			t.Errorf("%s/%s: %d %v, want %d %v", tc.target.String(), tc.protocol, got, found, tc.want, tc.found)
		}
	}
}
