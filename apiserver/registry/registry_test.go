package registry

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "ns"} }

func newPod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: meta("p"), Spec: corev1.PodSpec{Containers: containers}}
}

func newService(typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: meta("s"), Spec: corev1.ServiceSpec{Type: typ, Ports: ports, Selector: map[string]string{"app": "x"}}}
}

func newDeployment(selector, template map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: meta("d"), Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: selector},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: template},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}},
	}}
}

func TestPodDefaults(t *testing.T) {
	p := newPod(corev1.Container{Name: "c", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 80}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}})
	pods.PrepareCreate(p)
	s, c := p.Spec, p.Spec.Containers[0]
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"restartPolicy", s.RestartPolicy, corev1.RestartPolicyAlways},
		{"dnsPolicy", s.DNSPolicy, corev1.DNSClusterFirst},
		{"terminationGracePeriodSeconds", *s.TerminationGracePeriodSeconds, int64(30)},
		{"schedulerName", s.SchedulerName, "default-scheduler"},
		{"securityContext", *s.SecurityContext, corev1.PodSecurityContext{}},
		{"enableServiceLinks", *s.EnableServiceLinks, true},
		{"serviceAccountName", s.ServiceAccountName, "default"},
		{"serviceAccount", s.DeprecatedServiceAccount, "default"},
		{"terminationMessagePath", c.TerminationMessagePath, "/dev/termination-log"},
		{"terminationMessagePolicy", c.TerminationMessagePolicy, corev1.TerminationMessageReadFile},
		{"imagePullPolicy", c.ImagePullPolicy, corev1.PullAlways},
		{"port protocol", c.Ports[0].Protocol, corev1.ProtocolTCP},
		{"request from limit", c.Resources.Requests.Cpu().String(), "1"},
		{"phase", p.Status.Phase, corev1.PodPending},
		{"qosClass", p.Status.QOSClass, corev1.PodQOSBurstable},
		{"generation", p.Generation, int64(1)},
	} {
		if !apiequality.Semantic.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	again := p.DeepCopy()
	defaultPod(again)
	if !apiequality.Semantic.DeepEqual(again, p) {
		t.Errorf("defaults are not idempotent")
	}
	// DefaultTolerationSeconds is admission, not defaulting: webhooks run after it may
	// remove what it adds.
	if len(s.Tolerations) != 0 {
		t.Errorf("tolerations %v before admission", s.Tolerations)
	}
	if err := pods.AdmitFor(context.Background(), storedObjects{}, p, nil, ""); err != nil || len(p.Spec.Tolerations) != 2 {
		t.Errorf("tolerations after admission: %v (%v)", p.Spec.Tolerations, err)
	}
}

func TestPodIPFieldsAgree(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    corev1.PodStatus
		ip, ips   string
		host, hip string
	}{
		{"singular only", corev1.PodStatus{PodIP: "10.0.0.1", HostIP: "192.168.0.1"}, "10.0.0.1", "10.0.0.1", "192.168.0.1", "192.168.0.1"},
		{"plural only", corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd00::1"}, {IP: "10.0.0.1"}}, HostIPs: []corev1.HostIP{{IP: "192.168.0.1"}}}, "fd00::1", "fd00::1", "192.168.0.1", "192.168.0.1"},
		{"neither", corev1.PodStatus{}, "", "", "", ""},
	} {
		p := newPod(corev1.Container{Name: "c", Image: "nginx"})
		p.Status = tc.status
		defaultPod(p)
		first := func(ips []corev1.PodIP) string {
			if len(ips) == 0 {
				return ""
			}
			return ips[0].IP
		}
		hostFirst := ""
		if len(p.Status.HostIPs) > 0 {
			hostFirst = p.Status.HostIPs[0].IP
		}
		if p.Status.PodIP != tc.ip || first(p.Status.PodIPs) != tc.ips || p.Status.HostIP != tc.host || hostFirst != tc.hip {
			t.Errorf("%s: podIP %q podIPs %v hostIP %q hostIPs %v", tc.name, p.Status.PodIP, p.Status.PodIPs, p.Status.HostIP, p.Status.HostIPs)
		}
	}
}

func TestImagePullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"nginx":                      corev1.PullAlways,
		"nginx:latest":               corev1.PullAlways,
		"nginx:1.27":                 corev1.PullIfNotPresent,
		"localhost:5000/nginx":       corev1.PullAlways,
		"localhost:5000/nginx:v1":    corev1.PullIfNotPresent,
		"nginx@sha256:0123456789abc": corev1.PullIfNotPresent,
	} {
		c := corev1.Container{Image: image}
		defaultContainer(&c)
		if c.ImagePullPolicy != want {
			t.Errorf("%s: imagePullPolicy %s, want %s", image, c.ImagePullPolicy, want)
		}
	}
}

func TestServiceDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		etp  corev1.ServiceExternalTrafficPolicy
	}{
		{"clusterIP", newService("", corev1.ServicePort{Port: 80}), ""},
		{"nodePort", newService(corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80}), corev1.ServiceExternalTrafficPolicyCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.svc
			defaultService(s)
			p := s.Spec.Ports[0]
			if tc.name == "clusterIP" && s.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("type %q", s.Spec.Type)
			}
			if s.Spec.SessionAffinity != corev1.ServiceAffinityNone || p.Protocol != corev1.ProtocolTCP || p.TargetPort != intstr.FromInt32(80) ||
				*s.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyCluster || *s.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack ||
				s.Spec.ExternalTrafficPolicy != tc.etp {
				t.Errorf("defaults: %+v", s.Spec)
			}
		})
	}
}

// errs renders validation errors as "Type path" for comparison.
func errs(list field.ErrorList) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = string(e.Type) + " " + e.Field
	}
	slices.Sort(out)
	return out
}

func TestValidate(t *testing.T) {
	svcs := services(&ServiceAllocation{})
	badPod := newPod(
		corev1.Container{Name: "Bad_Name", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 0, Protocol: "HTTP"}}},
		corev1.Container{Name: "c"},
		corev1.Container{Name: "c", Image: "x"},
	)
	badPod.Spec.RestartPolicy = "Sometimes"
	headless := newService("")
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	nodePortOnClusterIP := newService("", corev1.ServicePort{Port: 80, NodePort: 30080})
	badName := newService("", corev1.ServicePort{Port: 80})
	badName.Name = "1svc"
	noSelector := newDeployment(nil, map[string]string{"app": "x"})
	noSelector.Spec.Selector = nil
	badSlice := &discoveryv1.EndpointSlice{ObjectMeta: meta("e"), AddressType: "IPv5", Endpoints: []discoveryv1.Endpoint{{}}}

	for _, tc := range []struct {
		name string
		s    Strategy
		obj  Object
		want []string
	}{
		{"pod ok", pods, newPod(corev1.Container{Name: "c", Image: "nginx"}), nil},
		{"pod without containers", pods, newPod(), []string{"FieldValueRequired spec.containers"}},
		{"bad pod", pods, badPod, []string{
			"FieldValueDuplicate spec.containers[2].name",
			"FieldValueInvalid spec.containers[0].name",
			"FieldValueInvalid spec.containers[0].ports[0].containerPort",
			"FieldValueNotSupported spec.containers[0].ports[0].protocol",
			"FieldValueNotSupported spec.restartPolicy",
			"FieldValueRequired spec.containers[1].image",
		}},
		{"service ok", svcs, newService("", corev1.ServicePort{Port: 80}), nil},
		{"bad service", svcs, newService("",
			corev1.ServicePort{Name: "a", Port: 0},
			corev1.ServicePort{Name: "a", Port: 81, Protocol: "HTTP"},
			corev1.ServicePort{Port: 82},
		), []string{
			"FieldValueDuplicate spec.ports[1].name",
			"FieldValueInvalid spec.ports[0].port",
			"FieldValueInvalid spec.ports[0].targetPort",
			"FieldValueNotSupported spec.ports[1].protocol",
			"FieldValueRequired spec.ports[2].name",
		}},
		{"service without ports", svcs, newService(""), []string{"FieldValueRequired spec.ports"}},
		{"headless without ports", svcs, headless, nil},
		{"externalName required", svcs, newService(corev1.ServiceTypeExternalName), []string{"FieldValueRequired spec.externalName"}},
		{"nodePort on ClusterIP", svcs, nodePortOnClusterIP, []string{"FieldValueForbidden spec.ports[0].nodePort"}},
		{"service name is a DNS-1035 label", svcs, badName, []string{"FieldValueInvalid metadata.name"}},
		{"deployment ok", deployments, newDeployment(map[string]string{"app": "x"}, map[string]string{"app": "x", "v": "1"}), nil},
		{"deployment selector mismatch", deployments, newDeployment(map[string]string{"app": "y"}, map[string]string{"app": "x"}),
			[]string{"FieldValueInvalid spec.template.metadata.labels"}},
		{"deployment without selector", deployments, noSelector, []string{"FieldValueRequired spec.selector"}},
		{"namespace name is a DNS label", namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a.b"}}, []string{"FieldValueInvalid metadata.name"}},
		{"endpoint slice", endpointSlices, badSlice, []string{"FieldValueNotSupported addressType", "FieldValueRequired endpoints[0].addresses"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.PrepareCreate(tc.obj)
			if got := errs(tc.s.ValidateObject(tc.obj, nil)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// updateCase is one update to validate: old is created, changed, and validated as an update.
type updateCase struct {
	name   string
	s      Strategy
	old    Object
	change func(Object)
	want   []string
}

func checkUpdates(t *testing.T, cases []updateCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.PrepareCreate(tc.old)
			tc.old.SetResourceVersion("1")
			obj := tc.old.DeepCopyObject().(Object)
			tc.change(obj)
			tc.s.PrepareUpdate(obj, tc.old, "")
			if got := errs(tc.s.ValidateObject(obj, tc.old)); !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateUpdate(t *testing.T) {
	svcs := services(&ServiceAllocation{})
	checkUpdates(t, []updateCase{
		{"pod image", pods, newPod(corev1.Container{Name: "c", Image: "a"}), func(o Object) { o.(*corev1.Pod).Spec.Containers[0].Image = "b" }, nil},
		{"pod restartPolicy", pods, newPod(corev1.Container{Name: "c", Image: "a"}),
			func(o Object) { o.(*corev1.Pod).Spec.RestartPolicy = corev1.RestartPolicyNever }, []string{"FieldValueForbidden spec"}},
		{"service clusterIP", svcs, &corev1.Service{ObjectMeta: meta("s"), Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.5", Ports: []corev1.ServicePort{{Port: 80}}}},
			func(o Object) {
				o.(*corev1.Service).Spec.ClusterIP, o.(*corev1.Service).Spec.ClusterIPs = "10.0.0.6", nil
			},
			[]string{"FieldValueInvalid spec.clusterIPs[0]"}},
		{"deployment selector", deployments, newDeployment(map[string]string{"app": "x"}, map[string]string{"app": "x", "v": "1"}),
			func(o Object) { o.(*appsv1.Deployment).Spec.Selector.MatchLabels["v"] = "1" }, []string{"FieldValueInvalid spec.selector"}},
	})
}

// fakeHooks stands in for storage: a set of claimed keys.
type fakeHooks map[string]bool

func (h fakeHooks) Taken(_ context.Context, key string) (bool, error) { return h[key], nil }

func TestServiceAllocation(t *testing.T) {
	_, ipRange, _ := net.ParseCIDR("10.96.0.0/29") // .2 to .6 are allocatable
	svcs := services(&ServiceAllocation{ClusterIPRange: ipRange, NodePortBase: 30000, NodePortSize: 3})
	ctx := context.Background()
	create := func(h fakeHooks, s *corev1.Service) field.ErrorList {
		svcs.PrepareCreate(s)
		return svcs.AllocateFor(ctx, h, s, nil)
	}

	t.Run("clusterIP and nodePorts", func(t *testing.T) {
		h := fakeHooks{"serviceips/10.96.0.2": true, "serviceips/10.96.0.3": true, "serviceips/10.96.0.5": true, "serviceips/10.96.0.6": true,
			"nodeports/30000": true, "nodeports/30002": true}
		s := newService(corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "dns", Port: 53}, corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP})
		if e := create(h, s); len(e) > 0 {
			t.Fatal(e)
		}
		if s.Spec.ClusterIP != "10.96.0.4" || !slices.Equal(s.Spec.ClusterIPs, []string{"10.96.0.4"}) || s.Spec.IPFamilies[0] != corev1.IPv4Protocol {
			t.Errorf("clusterIP %q %q %v", s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies)
		}
		if s.Spec.Ports[0].NodePort != 30001 || s.Spec.Ports[1].NodePort != 30001 {
			t.Errorf("nodePorts %d %d, want 30001 shared", s.Spec.Ports[0].NodePort, s.Spec.Ports[1].NodePort)
		}
		if got, want := svcs.ClaimsOf(s), []string{"nodeports/30001", "serviceips/10.96.0.4"}; !slices.Equal(got, want) {
			t.Errorf("claims %q, want %q", got, want)
		}
	})

	t.Run("kubernetes service", func(t *testing.T) {
		s := newService("", corev1.ServicePort{Port: 443})
		s.Namespace, s.Name = "default", "kubernetes"
		if e := create(fakeHooks{}, s); len(e) > 0 || s.Spec.ClusterIP != "10.96.0.1" {
			t.Errorf("got %q, %v", s.Spec.ClusterIP, e)
		}
	})

	t.Run("headless", func(t *testing.T) {
		s := newService("", corev1.ServicePort{Port: 80})
		s.Spec.ClusterIP = corev1.ClusterIPNone
		if e := create(fakeHooks{}, s); len(e) > 0 || len(svcs.ClaimsOf(s)) > 0 {
			t.Errorf("got claims %q, %v", svcs.ClaimsOf(s), e)
		}
	})

	for _, tc := range []struct {
		name      string
		h         fakeHooks
		ip        string
		nodePort  int32
		want, msg string
	}{
		{"taken IP", fakeHooks{"serviceips/10.96.0.3": true}, "10.96.0.3", 0, "FieldValueInvalid spec.clusterIPs[0]", "already allocated"},
		{"IP out of range", fakeHooks{}, "10.97.0.3", 0, "FieldValueInvalid spec.clusterIPs[0]", "not in the valid range"},
		{"broadcast IP", fakeHooks{}, "10.96.0.7", 0, "FieldValueInvalid spec.clusterIPs[0]", "not in the valid range"},
		{"taken nodePort", fakeHooks{"nodeports/30001": true}, "", 30001, "FieldValueInvalid spec.ports[0].nodePort", "already allocated"},
		{"nodePort out of range", fakeHooks{}, "", 31000, "FieldValueInvalid spec.ports[0].nodePort", "valid range"},
		{"full range", fakeHooks{"serviceips/10.96.0.2": true, "serviceips/10.96.0.3": true, "serviceips/10.96.0.4": true,
			"serviceips/10.96.0.5": true, "serviceips/10.96.0.6": true}, "", 0, "InternalError spec.clusterIPs[0]", "range is full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80, NodePort: tc.nodePort})
			s.Spec.ClusterIP = tc.ip
			e := create(tc.h, s)
			if got := errs(e); len(got) != 1 || got[0] != tc.want || !strings.Contains(e[0].Error(), tc.msg) {
				t.Errorf("errors %v, want %s (%s)", e, tc.want, tc.msg)
			}
		})
	}

	t.Run("update keeps and drops", func(t *testing.T) {
		old := newService(corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80})
		if e := create(fakeHooks{}, old); len(e) > 0 {
			t.Fatal(e)
		}
		old.ResourceVersion = "1"
		held := fakeHooks{}
		for _, k := range svcs.ClaimsOf(old) {
			held[k] = true
		}
		update := func(change func(*corev1.Service)) *corev1.Service {
			s := newService(corev1.ServiceTypeNodePort, corev1.ServicePort{Port: 80})
			s.ResourceVersion = "1"
			change(s)
			svcs.PrepareUpdate(s, old, "")
			if e := svcs.AllocateFor(ctx, held, s, old); len(e) > 0 {
				t.Fatal(e)
			}
			if e := svcs.ValidateObject(s, old); len(e) > 0 {
				t.Fatal(e)
			}
			return s
		}
		s := update(func(*corev1.Service) {})
		if s.Spec.ClusterIP != old.Spec.ClusterIP || s.Spec.Ports[0].NodePort != old.Spec.Ports[0].NodePort {
			t.Errorf("update lost allocations: %+v", s.Spec)
		}
		s = update(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
		if s.Spec.Ports[0].NodePort != 0 || s.Spec.ExternalTrafficPolicy != "" || s.Spec.ClusterIP != old.Spec.ClusterIP {
			t.Errorf("to ClusterIP: %+v", s.Spec)
		}
		s = update(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.com"
		})
		if s.Spec.ClusterIP != "" || s.Spec.ClusterIPs != nil || s.Spec.Ports[0].NodePort != 0 || len(svcs.ClaimsOf(s)) > 0 {
			t.Errorf("to ExternalName: %+v", s.Spec)
		}
	})
}

func TestStatusSplit(t *testing.T) {
	old := newDeployment(map[string]string{"app": "x"}, map[string]string{"app": "x"})
	deployments.PrepareCreate(old)
	old.Status.Replicas = 1

	for _, tc := range []struct {
		name        string
		subresource string
		change      func(*appsv1.Deployment)
		replicas    int32 // spec.replicas after the update
		status1     int32 // status.replicas after the update
		gen         int64
	}{
		{"spec write keeps status, bumps generation", "", func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32(3)); d.Status.Replicas = 9 }, 3, 1, 2},
		{"spec write without change", "", func(d *appsv1.Deployment) { d.Status.Replicas = 9 }, 1, 1, 1},
		{"status write keeps spec", "status", func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32(3)); d.Status.Replicas = 9 }, 1, 9, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := old.DeepCopy()
			tc.change(d)
			deployments.PrepareUpdate(d, old, tc.subresource)
			if *d.Spec.Replicas != tc.replicas || d.Status.Replicas != tc.status1 || d.Generation != tc.gen {
				t.Errorf("spec.replicas %d status.replicas %d generation %d, want %d %d %d",
					*d.Spec.Replicas, d.Status.Replicas, d.Generation, tc.replicas, tc.status1, tc.gen)
			}
		})
	}
}

func TestPodRow(t *testing.T) {
	running := corev1.ContainerStatus{Name: "c", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	crashing := corev1.ContainerStatus{Name: "c", RestartCount: 3,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(time.Now().Add(-5 * time.Minute))}}}
	withStatus := func(phase corev1.PodPhase, cs ...corev1.ContainerStatus) *corev1.Pod {
		p := newPod(corev1.Container{Name: "c", Image: "x"})
		p.Status.Phase, p.Status.ContainerStatuses = phase, cs
		return p
	}
	initPod := withStatus(corev1.PodPending)
	initPod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "x"}}
	initPod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	terminating := withStatus(corev1.PodRunning, running)
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	placed := withStatus(corev1.PodRunning, running)
	placed.Spec.NodeName, placed.Status.PodIPs = "n1", []corev1.PodIP{{IP: "10.244.0.5"}}

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []any // Ready, Status, Restarts, then IP and Node
	}{
		{"pending", withStatus(corev1.PodPending), []any{"0/1", "Pending", "0", "<none>", "<none>"}},
		{"running", placed, []any{"1/1", "Running", "0", "10.244.0.5", "n1"}},
		{"crash loop", withStatus(corev1.PodRunning, crashing), []any{"0/1", "CrashLoopBackOff", "3 (5m ago)", "<none>", "<none>"}},
		{"init", initPod, []any{"0/1", "Init:0/1", "0", "<none>", "<none>"}},
		{"terminating", terminating, []any{"1/1", "Terminating", "0", "<none>", "<none>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := pods.TableRow(tc.pod)
			if len(row) != len(pods.TableColumns()) {
				t.Fatalf("%d cells for %d columns", len(row), len(pods.TableColumns()))
			}
			got := []any{row[1], row[2], row[3], row[5], row[6]}
			if !slices.Equal(got, tc.want) {
				t.Errorf("row %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAllRows checks every resource renders a zero object with one cell per column.
func TestAllRows(t *testing.T) {
	for _, s := range All(&ServiceAllocation{}) {
		obj := s.NewObject()
		if got, want := len(s.TableRow(obj)), len(s.TableColumns()); got != want {
			t.Errorf("%s: %d cells for %d columns", s.Describe().Resource, got, want)
		}
		if s.SelectableFields(obj)["metadata.name"] != "" {
			t.Errorf("%s: fields", s.Describe().Resource)
		}
	}
}

func TestEndpointSliceGeneration(t *testing.T) {
	s := &discoveryv1.EndpointSlice{ObjectMeta: meta("s"), AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}}
	endpointSlices.PrepareCreate(s)
	if s.Generation != 1 {
		t.Fatalf("generation on create %d, want 1", s.Generation)
	}
	for _, tc := range []struct {
		name   string
		change func(*discoveryv1.EndpointSlice)
		want   int64
	}{
		{"annotation only", func(s *discoveryv1.EndpointSlice) { s.Annotations = map[string]string{"a": "b"} }, 1},
		{"label", func(s *discoveryv1.EndpointSlice) { s.Labels = map[string]string{"a": "b"} }, 2},
		{"endpoints", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses[0] = "10.0.0.2" }, 2},
		{"ports", func(s *discoveryv1.EndpointSlice) { s.Ports = []discoveryv1.EndpointPort{{Port: new(int32(80))}} }, 2},
	} {
		next := s.DeepCopy()
		tc.change(next)
		endpointSlices.PrepareUpdate(next, s, "")
		if next.Generation != tc.want {
			t.Errorf("%s: generation %d, want %d", tc.name, next.Generation, tc.want)
		}
	}
}
