package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FindPort resolves a service port's targetPort on pod. A number is taken as is. A name is
// looked up among the ports of the regular containers, then among those of sidecars (init
// containers that keep running, restartPolicy Always); the first port with that name and
// exactly the service port's protocol wins. false when no port matches.
func FindPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	if sp.TargetPort.Type == intstr.Int {
		return sp.TargetPort.IntVal, true
	}
	name := sp.TargetPort.StrVal
	match := func(containers []corev1.Container, sidecarsOnly bool) (int32, bool) {
		for _, c := range containers {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				if p.Name == name && p.Protocol == sp.Protocol {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	}
	if port, ok := match(pod.Spec.Containers, false); ok {
		return port, true
	}
	return match(pod.Spec.InitContainers, true)
}
