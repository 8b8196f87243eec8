package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// templatePod is a pod as a Deployment makes them: variant picks one of a few templates.
func templatePod(name string, variant int) *corev1.Pod {
	grace := int64(30)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "web", "hash": fmt.Sprint(variant % 2)},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: fmt.Sprintf("registry.example/app:%d", variant),
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "x"}},
			}, {Name: "sidecar", Image: "registry.example/sidecar:1"}},
			Tolerations:                   []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
			SecurityContext:               &corev1.PodSecurityContext{},
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			NodeName:                      "node-" + fmt.Sprint(variant%3),
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
}

func encodePod(t *testing.T, p *corev1.Pod) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobufSerializer.Encode(p, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeBoth decodes data with s, plainly, and with apimachinery's serializer, and fails unless
// all three give the same pod.
func decodeBoth(t *testing.T, s *sharer, data []byte) *corev1.Pod {
	t.Helper()
	shared, plain := &corev1.Pod{}, &corev1.Pod{}
	var sc scratch
	if done, err := decodeProtobuf(data, shared, s, &sc); !done || err != nil {
		t.Fatalf("shared decode: done %v, %v", done, err)
	}
	if done, err := decodeProtobuf(data, plain, nil, nil); !done || err != nil {
		t.Fatalf("plain decode: done %v, %v", done, err)
	}
	reference := &corev1.Pod{}
	if _, _, err := protobufSerializer.Decode(data, nil, reference); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(shared, plain) || !reflect.DeepEqual(plain, reference) {
		t.Fatalf("decodes differ:\nshared    %+v\nplain     %+v\nreference %+v", shared, plain, reference)
	}
	return shared
}

func sameSlice[E any](a, b []E) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestSharedParts: pods alike decode to pods sharing their alike parts (from the second pod
// with a part on: the first only has its encoding noted) and equal to what a plain decode gives;
// parts that differ are not shared.
func TestSharedParts(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	a0 := decodeBoth(t, s, encodePod(t, templatePod("a0", 0)))
	a1 := decodeBoth(t, s, encodePod(t, templatePod("a1", 0)))
	a2 := decodeBoth(t, s, encodePod(t, templatePod("a2", 0)))
	b := decodeBoth(t, s, encodePod(t, templatePod("b", 2))) // other image, same labels
	c := decodeBoth(t, s, encodePod(t, templatePod("c", 1))) // other image and labels

	if sameSlice(a0.Spec.Containers, a1.Spec.Containers) {
		t.Error("a part seen once is already kept")
	}
	if !sameSlice(a1.Spec.Containers, a2.Spec.Containers) || !sameSlice(a1.Spec.Tolerations, a2.Spec.Tolerations) ||
		a1.Spec.SecurityContext != a2.Spec.SecurityContext || a1.Spec.TerminationGracePeriodSeconds != a2.Spec.TerminationGracePeriodSeconds ||
		!sameMap(a1.Labels, a2.Labels) {
		t.Error("pods of one template do not share their parts")
	}
	if sameSlice(a1.Spec.Containers, b.Spec.Containers) {
		t.Error("different containers are shared")
	}
	if !sameMap(a1.Labels, b.Labels) || !sameSlice(a1.Spec.Tolerations, b.Spec.Tolerations) {
		t.Error("the same labels and tolerations in an otherwise different pod are not shared")
	}
	if sameMap(a1.Labels, c.Labels) {
		t.Error("different labels are shared")
	}
	if a1.Name != "a1" || a2.Name != "a2" || a2.Spec.NodeName != "node-0" || b.Spec.NodeName != "node-2" {
		t.Error("fields of each pod's own got mixed up")
	}
}

// tokenPod is a template pod with a service account token volume of its own, mounted in its
// first container, as the ServiceAccount admission plugin gives every pod.
func tokenPod(name string) *corev1.Pod {
	p := templatePod(name, 0)
	volume := "kube-api-access-" + name
	p.Spec.Volumes = []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
	}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: volume, MountPath: "/var/run/secrets"}}
	return p
}

// TestSharedPartsDeeper: parts that differ in one place from pod to pod (a volume and a mount
// named after the pod) are not shared whole, but what they hold that is alike is.
func TestSharedPartsDeeper(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, decodeBoth(t, s, encodePod(t, tokenPod(fmt.Sprint("p", i)))))
	}
	a, b := pods[2], pods[3]
	if sameSlice(a.Spec.Containers, b.Spec.Containers) || sameSlice(a.Spec.Volumes, b.Spec.Volumes) {
		t.Fatal("containers or volumes that differ are shared")
	}
	if !sameSlice(a.Spec.Containers[0].Ports, b.Spec.Containers[0].Ports) || !sameSlice(a.Spec.Containers[0].Env, b.Spec.Containers[0].Env) {
		t.Error("the ports and env of containers that differ only in a volume mount are not shared")
	}
	if a.Spec.Volumes[0].Projected != b.Spec.Volumes[0].Projected {
		t.Error("the same projected volume source under different volume names is not shared")
	}
	if unsafe.StringData(a.Spec.Containers[0].Image) != unsafe.StringData(b.Spec.Containers[0].Image) ||
		unsafe.StringData(a.Spec.SchedulerName) != unsafe.StringData(b.Spec.SchedulerName) && a.Spec.SchedulerName != "" ||
		unsafe.StringData(a.Namespace) != unsafe.StringData(b.Namespace) {
		t.Error("equal strings are not shared")
	}
	if a.Spec.Containers[0].VolumeMounts[0].Name == b.Spec.Containers[0].VolumeMounts[0].Name {
		t.Error("each pod's own mount got mixed up")
	}
}

// TestSharedPartsRandom: pods drawn at random from a few templates with random changes decode
// exactly as they do without sharing, in any order, and most share their containers.
func TestSharedPartsRandom(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	rnd := rand.New(rand.NewPCG(1, 2))
	seen := map[*corev1.Container]bool{}
	shared := 0
	for i := range 500 {
		p := templatePod(fmt.Sprint("p", i), rnd.IntN(5))
		switch rnd.IntN(6) {
		case 0:
			p.Spec.Containers = p.Spec.Containers[:1]
		case 1:
			p.Labels["extra"] = fmt.Sprint(rnd.IntN(3))
		case 2:
			p.Spec.Tolerations = nil
			p.Spec.SecurityContext = nil
		case 3:
			p.Annotations = map[string]string{"a": fmt.Sprint(rnd.IntN(2))}
		case 4:
			p = tokenPod(p.Name)
		}
		got := decodeBoth(t, s, encodePod(t, p))
		if seen[&got.Spec.Containers[0]] {
			shared++
		}
		seen[&got.Spec.Containers[0]] = true
	}
	if shared < 300 {
		t.Errorf("only %d of 500 pods share their containers with an earlier one", shared)
	}
}

// TestSharedPartsSplitField: a list whose elements do not lie together in the encoding (legal
// protobuf, though no Kubernetes encoder writes it) is decoded whole and not shared.
func TestSharedPartsSplitField(t *testing.T) {
	split := func(name string) []byte {
		p := templatePod(name, 0)
		first, second := p.Spec.Containers[0], p.Spec.Containers[1]
		var spec []byte
		for _, c := range []*corev1.Container{&first, nil, &second} {
			if c == nil { // restartPolicy (field 3) between the two containers (field 2)
				spec = protowire.AppendTag(spec, 3, protowire.BytesType)
				spec = protowire.AppendString(spec, "Always")
				continue
			}
			b, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			spec = protowire.AppendTag(spec, 2, protowire.BytesType)
			spec = protowire.AppendBytes(spec, b)
		}
		meta, err := p.ObjectMeta.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var raw []byte
		raw = protowire.AppendTag(raw, 1, protowire.BytesType)
		raw = protowire.AppendBytes(raw, meta)
		raw = protowire.AppendTag(raw, 2, protowire.BytesType)
		raw = protowire.AppendBytes(raw, spec)
		return wrap(t, raw)
	}

	s := newSharer(reflect.TypeFor[corev1.Pod]())
	decodeBoth(t, s, split("w")) // noted
	x := decodeBoth(t, s, split("x"))
	y := decodeBoth(t, s, split("y"))
	if len(x.Spec.Containers) != 2 || x.Spec.Containers[1].Name != "sidecar" || x.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Fatalf("decoded %+v", x.Spec)
	}
	if sameSlice(x.Spec.Containers, y.Spec.Containers) {
		t.Error("a split list was shared")
	}
	if !sameMap(x.Labels, y.Labels) {
		t.Error("the labels of the same encoding are not shared")
	}
}

// TestSharedPartsBounded: every object different does not grow the tables without bound, and
// decoding stays right as they start over.
func TestSharedPartsBounded(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	for i := range 3 * maxShared {
		p := templatePod(fmt.Sprint("p", i), 0)
		p.Labels["i"] = fmt.Sprint(i / 2) // each label set in two pods in a row: kept the second time
		p.Annotations = map[string]string{"big": strings.Repeat("x", 2000+i)}
		if i%500 == 0 {
			decodeBoth(t, s, encodePod(t, p))
			continue
		}
		var sc scratch
		if done, err := decodeProtobuf(encodePod(t, p), &corev1.Pod{}, s, &sc); !done || err != nil {
			t.Fatal(done, err)
		}
		if s.bytes > maxSharedBytes || s.noted > maxNoted {
			t.Fatalf("after %d pods the tables hold %d bytes and %d hashes", i+1, s.bytes, s.noted)
		}
	}
	for i, table := range s.tables {
		if len(table.values) > maxShared {
			t.Errorf("table %d holds %d values", i, len(table.values))
		}
	}
}

// TestSharedPartsSameObjectTwice: an object seen again (an update) does not make its own parts
// look common; a part in two objects is kept.
func TestSharedPartsSameObjectTwice(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	pod := func(name string) *corev1.Pod {
		p := templatePod(name, 0)
		p.Labels = map[string]string{"only": "here"}
		return p
	}
	decodeBoth(t, s, encodePod(t, pod("solo")))
	decodeBoth(t, s, encodePod(t, pod("solo")))
	if n := len(s.tables[s.plan.parts[0].plan.leaf(11).table].values); n != 0 {
		t.Fatalf("labels of one object seen twice kept: %d values", n)
	}
	other := decodeBoth(t, s, encodePod(t, pod("other")))
	third := decodeBoth(t, s, encodePod(t, pod("third")))
	if !sameMap(other.Labels, third.Labels) {
		t.Error("labels in two objects are not shared with a third")
	}
}

// TestSharedSlicesHaveNoSpareRoom: appending to one object's shared slice does not write into
// another's.
func TestSharedSlicesHaveNoSpareRoom(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	var pods []*corev1.Pod
	for i := range 3 {
		p := templatePod(fmt.Sprint("p", i), 0)
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "third"})
		pods = append(pods, decodeBoth(t, s, encodePod(t, p)))
	}
	a, b := pods[1].Spec.Containers, pods[2].Spec.Containers
	if !sameSlice(a, b) {
		t.Fatal("not shared")
	}
	ea := append(a, corev1.Container{Name: "for-a"})
	eb := append(b, corev1.Container{Name: "for-b"})
	if ea[3].Name != "for-a" || eb[3].Name != "for-b" {
		t.Errorf("appends to shared slices collide: %q %q", ea[3].Name, eb[3].Name)
	}
	if env := pods[2].Spec.Containers[0].Env; cap(env) != len(env) {
		t.Errorf("a shared slice a level down has spare room: len %d cap %d", len(env), cap(env))
	}
}

// TestSharedPartsPartTwice: an object whose spec is written twice (decoding merges the two, so
// the containers of both add up) is decoded plainly and leaves the tables alone: later pods with
// one of its halves decode as themselves.
func TestSharedPartsPartTwice(t *testing.T) {
	p := templatePod("twice", 0)
	halves := [2]corev1.PodSpec{{Containers: p.Spec.Containers[:1]}, {Containers: p.Spec.Containers[1:]}}
	meta, err := p.ObjectMeta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	raw := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), meta)
	for _, h := range halves {
		b, err := h.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		raw = protowire.AppendBytes(protowire.AppendTag(raw, 2, protowire.BytesType), b)
	}
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	for range 3 {
		if got := decodeBoth(t, s, wrap(t, raw)); len(got.Spec.Containers) != 2 {
			t.Fatalf("%d containers, want both halves'", len(got.Spec.Containers))
		}
	}
	for range 3 {
		one := templatePod("one", 0)
		one.Spec = halves[0]
		if got := decodeBoth(t, s, encodePod(t, one)); len(got.Spec.Containers) != 1 {
			t.Fatalf("%d containers, want 1", len(got.Spec.Containers))
		}
	}
}

// wrap wraps a Pod's own encoding as the protobuf serializer does.
func wrap(t *testing.T, raw []byte) []byte {
	t.Helper()
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: raw}
	env, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, protobufMagic...), env...)
}

// TestSharedPartsConcurrently: one sharer used by several goroutines at once (run with -race).
func TestSharedPartsConcurrently(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	var encoded [][]byte
	for i := range 50 {
		encoded = append(encoded, encodePod(t, templatePod(fmt.Sprint("p", i), i%4)))
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, data := range encoded {
				decodeBoth(t, s, data)
			}
		})
	}
	wg.Wait()
}

// TestSharedWatchStream: a protobuf watch stream decoded in parallel with a sharer gives every
// pod as sent, checked after the whole stream so that a frame buffer reused too early would show.
func TestSharedWatchStream(t *testing.T) {
	var events []watch.Event
	for i := range 3000 {
		events = append(events, watch.Event{Type: watch.Added, Object: templatePod(fmt.Sprint("p", i), i%3)})
	}
	r := &Typed[*corev1.Pod]{gvk: corev1.SchemeGroupVersion.WithKind("Pod"), resource: "pods"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := protobufFrames(io.NopCloser(bytes.NewReader(stream(t, true, events, ""))))
	var got []*corev1.Pod
	for ev := range r.decodeInParallel(ctx, cancel, read, mimeProtobuf, newSharer(reflect.TypeFor[corev1.Pod]())) {
		got = append(got, ev.Object)
	}
	if len(got) != len(events) {
		t.Fatalf("%d pods, want %d", len(got), len(events))
	}
	for i, p := range got {
		if !apiequality.Semantic.DeepEqual(p, events[i].Object) {
			t.Fatalf("pod %d:\n%v\nwant\n%v", i, p, events[i].Object)
		}
	}
	// Workers decode in parallel, so which pod's containers are kept varies; most share them.
	last, shared := got[len(got)-3], 0
	for i := 0; i < len(got); i += 3 {
		if sameSlice(got[i].Spec.Containers, last.Spec.Containers) {
			shared++
		}
	}
	if shared < len(got)/3/2 {
		t.Errorf("%d of %d pods of one template in a stream share their containers", shared, len(got)/3)
	}
}

// TestDecodeProtobufEnvelopes: what the fast path does not handle goes to the general decoder,
// which answers as before.
func TestDecodeProtobufEnvelopes(t *testing.T) {
	svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	var buf bytes.Buffer
	if err := protobufSerializer.Encode(svc, &buf); err != nil {
		t.Fatal(err)
	}
	if err := decode(mimeProtobuf, buf.Bytes(), &corev1.Pod{}); err == nil || !strings.Contains(err.Error(), "Service") {
		t.Errorf("a Service decoded into a Pod: %v", err)
	}
	pod := encodePod(t, templatePod("p", 0))
	if err := decode(mimeProtobuf, pod[:len(pod)/2], &corev1.Pod{}); err == nil {
		t.Error("a truncated pod decoded")
	}
	// raw (field 2 of the envelope) as a varint instead of bytes.
	bad := append(append([]byte{}, protobufMagic...), protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 7)...)
	if done, _ := decodeProtobuf(bad, &corev1.Pod{}, nil, nil); done {
		t.Error("an envelope with a varint raw field was taken by the fast path")
	}
	// A content encoding is left to the general decoder.
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: []byte{}, ContentEncoding: "gzip"}
	env, _ := unk.Marshal()
	if done, _ := decodeProtobuf(append(append([]byte{}, protobufMagic...), env...), &corev1.Pod{}, nil, nil); done {
		t.Error("an encoded envelope was taken by the fast path")
	}
	// A grouped type.
	dep := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: metav1.ObjectMeta{Name: "d"}}
	buf.Reset()
	if err := protobufSerializer.Encode(dep, &buf); err != nil {
		t.Fatal(err)
	}
	got := &appsv1.Deployment{}
	if done, err := decodeProtobuf(buf.Bytes(), got, nil, nil); !done || err != nil || got.Name != "d" || got.APIVersion != "apps/v1" {
		t.Errorf("deployment: done %v, %v, %+v", done, err, got.TypeMeta)
	}
}

// TestSharedPartsOtherType: SharedParts serves the first type it is used for; other types are
// decoded without sharing.
func TestSharedPartsOtherType(t *testing.T) {
	sp := &SharedParts{}
	ctx := WithSharedParts(context.Background(), sp)
	if sharedPartsFrom(ctx).sharerFor(reflect.TypeFor[corev1.Pod]()) == nil {
		t.Fatal("no sharer for the first type")
	}
	if sharedPartsFrom(ctx).sharerFor(reflect.TypeFor[corev1.Service]()) != nil {
		t.Fatal("a sharer for a second type")
	}
	if sharedPartsFrom(context.Background()).sharerFor(reflect.TypeFor[corev1.Pod]()) != nil {
		t.Fatal("a sharer without SharedParts")
	}
}
