package registry

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func newIngress() *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{ObjectMeta: meta("web"), Spec: networkingv1.IngressSpec{
		IngressClassName: new("nginx"),
		TLS:              []networkingv1.IngressTLS{{Hosts: []string{"web.example.com"}, SecretName: "web-tls"}},
		Rules: []networkingv1.IngressRule{{Host: "web.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
		}}}},
	}}
}

func TestIngressValidation(t *testing.T) {
	path := func(i *networkingv1.Ingress) *networkingv1.HTTPIngressPath { return &i.Spec.Rules[0].HTTP.Paths[0] }
	checkCreate(t, ingresses, newIngress, []validCase[*networkingv1.Ingress]{
		{"valid", nil, nil},
		{"wildcard host", func(i *networkingv1.Ingress) { i.Spec.Rules[0].Host = "*.example.com" }, nil},
		{"no rules, no default backend", func(i *networkingv1.Ingress) { i.Spec.Rules = nil }, []string{"FieldValueInvalid spec"}},
		{"IP host", func(i *networkingv1.Ingress) { i.Spec.Rules[0].Host = "1.2.3.4" }, []string{"FieldValueInvalid spec.rules[0].host"}},
		{"no path type", func(i *networkingv1.Ingress) { path(i).PathType = nil }, []string{"FieldValueRequired spec.rules[0].http.paths[0].pathType"}},
		{"relative path", func(i *networkingv1.Ingress) { path(i).Path = "web" }, []string{"FieldValueInvalid spec.rules[0].http.paths[0].path"}},
		{"unknown path type", func(i *networkingv1.Ingress) { path(i).PathType = new(networkingv1.PathType("Regex")) },
			[]string{"FieldValueNotSupported spec.rules[0].http.paths[0].pathType"}},
		{"no port", func(i *networkingv1.Ingress) { path(i).Backend.Service.Port = networkingv1.ServiceBackendPort{} },
			[]string{"FieldValueRequired spec.rules[0].http.paths[0].backend"}},
		{"both backends", func(i *networkingv1.Ingress) {
			path(i).Backend.Resource = &corev1.TypedLocalObjectReference{Kind: "Bucket", Name: "b"}
		}, []string{"FieldValueInvalid spec.rules[0].http.paths[0].backend"}},
		{"annotation and class disagree", func(i *networkingv1.Ingress) {
			i.Annotations = map[string]string{ingressClassAnnotation: "other"}
		}, []string{"FieldValueInvalid annotations.kubernetes.io/ingress.class"}},
		{"bad TLS secret", func(i *networkingv1.Ingress) { i.Spec.TLS[0].SecretName = "Bad_Name" }, []string{"FieldValueInvalid spec.tls[0].secretName"}},
	})
}

func TestIngressAdmissionAndTable(t *testing.T) {
	def := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx",
		Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}}}
	objs := storedObjects{ingressClassesResource: {def}}
	i := newIngress()
	i.Spec.IngressClassName = nil
	ingresses.PrepareCreate(i)
	if err := ingresses.AdmitFor(context.Background(), objs, i, nil, ""); err != nil || deref(i.Spec.IngressClassName) != "nginx" {
		t.Errorf("default class: %v, %v", err, i.Spec.IngressClassName)
	}
	i.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "10.0.0.2"}, {Hostname: "lb.example.com"}}
	checkTable(t, ingresses, i, []string{"Name", "Class", "Hosts", "Address", "Ports", "Age"},
		[]any{"nginx", "web.example.com", "10.0.0.2,lb.example.com", "80, 443", "<unknown>"})
}

func TestIngressClass(t *testing.T) {
	base := func() *networkingv1.IngressClass {
		return &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx"}, Spec: networkingv1.IngressClassSpec{Controller: "example.com/ingress"}}
	}
	checkCreate(t, ingressClasses, base, []validCase[*networkingv1.IngressClass]{
		{"valid", nil, nil},
		{"controller not a domain path", func(c *networkingv1.IngressClass) { c.Spec.Controller = "nginx" }, []string{"FieldValueInvalid spec.controller"}},
		{"cluster parameters with a namespace", func(c *networkingv1.IngressClass) {
			c.Spec.Parameters = &networkingv1.IngressClassParametersReference{Kind: "Params", Name: "p", Namespace: new("ns")}
		}, []string{"FieldValueForbidden spec.parameters.namespace"}},
		{"namespaced parameters without one", func(c *networkingv1.IngressClass) {
			c.Spec.Parameters = &networkingv1.IngressClassParametersReference{Kind: "Params", Name: "p", Scope: new(networkingv1.IngressClassParametersReferenceScopeNamespace)}
		}, []string{"FieldValueRequired spec.parameters.namespace"}},
	})
	checkUpdate(t, ingressClasses, base, []validCase[*networkingv1.IngressClass]{
		{"controller", func(c *networkingv1.IngressClass) { c.Spec.Controller = "example.com/other" }, []string{"FieldValueInvalid spec.controller"}},
	})
	c := base()
	c.Spec.Parameters = &networkingv1.IngressClassParametersReference{APIGroup: new("k8s.example.com"), Kind: "Params", Name: "p"}
	ingressClasses.PrepareCreate(c)
	if deref(c.Spec.Parameters.Scope) != networkingv1.IngressClassParametersReferenceScopeCluster || c.Generation != 1 {
		t.Errorf("scope %v, generation %d", c.Spec.Parameters.Scope, c.Generation)
	}
	checkTable(t, ingressClasses, c, []string{"Name", "Controller", "Parameters", "Age"},
		[]any{"example.com/ingress", "Params.k8s.example.com/p", "<unknown>"})
}

func newNetworkPolicy() *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(80)
	return &networkingv1.NetworkPolicy{ObjectMeta: meta("web"), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}, Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
	}}
}

func TestNetworkPolicy(t *testing.T) {
	rule := func(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicyIngressRule {
		return &np.Spec.Ingress[0]
	}
	checkCreate(t, networkPolicies, newNetworkPolicy, []validCase[*networkingv1.NetworkPolicy]{
		{"valid", nil, nil},
		{"empty peer", func(np *networkingv1.NetworkPolicy) { rule(np).From[0].PodSelector = nil }, []string{"FieldValueRequired spec.ingress[0].from[0]"}},
		{"ipBlock and a selector", func(np *networkingv1.NetworkPolicy) {
			rule(np).From[0].IPBlock = &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"11.0.0.0/16"}}
		}, []string{"FieldValueForbidden spec.ingress[0].from[0]", "FieldValueInvalid spec.ingress[0].from[0].ipBlock.except[0]"}},
		{"end before start", func(np *networkingv1.NetworkPolicy) { rule(np).Ports[0].EndPort = new(int32(79)) },
			[]string{"FieldValueInvalid spec.ingress[0].ports[0].endPort"}},
		{"unknown protocol and type", func(np *networkingv1.NetworkPolicy) {
			rule(np).Ports[0].Protocol = new(corev1.Protocol("ICMP"))
			np.Spec.PolicyTypes = []networkingv1.PolicyType{"Sideways"}
		}, []string{"FieldValueNotSupported spec.ingress[0].ports[0].protocol", "FieldValueNotSupported spec.policyTypes[0]"}},
	})
	np := newNetworkPolicy()
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	networkPolicies.PrepareCreate(np)
	if got := np.Spec.PolicyTypes; len(got) != 2 || deref(np.Spec.Ingress[0].Ports[0].Protocol) != corev1.ProtocolTCP {
		t.Errorf("defaults: types %v, protocol %v", got, np.Spec.Ingress[0].Ports[0].Protocol)
	}
	checkTable(t, networkPolicies, np, []string{"Name", "Pod-Selector", "Age"}, []any{"app=web", "<unknown>"})
}

func TestServiceCIDRAndIPAddress(t *testing.T) {
	cidr := func() *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.250.0.0/24"}}}
	}
	checkCreate(t, serviceCIDRs, cidr, []validCase[*networkingv1.ServiceCIDR]{
		{"valid", nil, nil},
		{"dual stack", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = append(c.Spec.CIDRs, "fd00::/108") }, nil},
		{"none", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = nil }, []string{"FieldValueRequired spec.cidrs"}},
		{"two of a family", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = append(c.Spec.CIDRs, "10.1.0.0/24") }, []string{"FieldValueInvalid spec.cidrs"}},
		{"not a CIDR", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = []string{"10.0.0.1"} }, []string{"FieldValueInvalid spec.cidrs[0]"}},
	})
	checkUpdate(t, serviceCIDRs, cidr, []validCase[*networkingv1.ServiceCIDR]{
		{"add the other family", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = append(c.Spec.CIDRs, "fd00::/108") }, nil},
		{"change", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = []string{"10.251.0.0/24"} }, []string{"FieldValueInvalid spec.cidrs[0]"}},
	})
	c := cidr()
	c.Status.Conditions = []metav1.Condition{{Type: "Ready"}}
	serviceCIDRs.PrepareCreate(c)
	if c.Generation != 0 || len(c.Status.Conditions) != 0 {
		t.Errorf("generation %d, status %v", c.Generation, c.Status)
	}
	checkTable(t, serviceCIDRs, c, []string{"Name", "CIDRs", "Age"}, []any{"10.250.0.0/24", "<unknown>"})

	addr := func() *networkingv1.IPAddress {
		return &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.250.0.10"}, Spec: networkingv1.IPAddressSpec{
			ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}}}
	}
	checkCreate(t, ipAddresses, addr, []validCase[*networkingv1.IPAddress]{
		{"valid", nil, nil},
		{"name not an address", func(a *networkingv1.IPAddress) { a.Name = "web" }, []string{"FieldValueInvalid metadata.name"}},
		{"no parent", func(a *networkingv1.IPAddress) { a.Spec.ParentRef = nil }, []string{"FieldValueRequired spec.parentRef"}},
		{"parent without resource", func(a *networkingv1.IPAddress) { a.Spec.ParentRef.Resource = "" }, []string{"FieldValueRequired spec.parentRef.resource"}},
	})
	checkUpdate(t, ipAddresses, addr, []validCase[*networkingv1.IPAddress]{
		{"parent", func(a *networkingv1.IPAddress) { a.Spec.ParentRef.Name = "other" }, []string{"FieldValueInvalid spec.parentRef"}},
	})
	checkTable(t, ipAddresses, addr(), []string{"Name", "ParentRef"}, []any{"services/default/web"})
}
