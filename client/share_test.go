package client

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// decodeBoth decodes data with s and plainly, and fails unless both give the same pod.
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
	if !reflect.DeepEqual(shared, plain) {
		t.Fatalf("shared decode differs:\n%+v\n%+v", shared, plain)
	}
	return shared
}

func sameSlice[E any](a, b []E) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestSharedParts: pods alike decode to pods sharing their alike parts and equal to what a plain
// decode gives; parts that differ are not shared.
func TestSharedParts(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	a1 := decodeBoth(t, s, encodePod(t, templatePod("a1", 0)))
	a2 := decodeBoth(t, s, encodePod(t, templatePod("a2", 0)))
	b := decodeBoth(t, s, encodePod(t, templatePod("b", 2))) // other image, same labels
	c := decodeBoth(t, s, encodePod(t, templatePod("c", 1))) // other image and labels

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

// TestSharedPartsRandom: pods drawn at random from a few templates with random changes decode
// exactly as they do without sharing, in any order.
func TestSharedPartsRandom(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	rnd := rand.New(rand.NewPCG(1, 2))
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
		}
		decodeBoth(t, s, encodePod(t, p))
	}
}

// TestSharedPartsSplitField: a list whose elements do not lie together in the encoding (legal
// protobuf, though no Kubernetes encoder writes it) is decoded whole and not shared.
func TestSharedPartsSplitField(t *testing.T) {
	p := templatePod("split", 0)
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
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Pod"}, Raw: raw}
	env, err := unk.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	data := append(append([]byte{}, protobufMagic...), env...)

	s := newSharer(reflect.TypeFor[corev1.Pod]())
	x := decodeBoth(t, s, data)
	y := decodeBoth(t, s, data)
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

// TestSharedPartsBounded: every object different does not grow the tables without bound.
func TestSharedPartsBounded(t *testing.T) {
	s := newSharer(reflect.TypeFor[corev1.Pod]())
	var sc scratch
	for i := range maxShared + 100 {
		p := templatePod("p", 0)
		p.Labels["i"] = fmt.Sprint(i)
		if done, err := decodeProtobuf(encodePod(t, p), &corev1.Pod{}, s, &sc); !done || err != nil {
			t.Fatal(done, err)
		}
	}
	for i, seen := range s.seen {
		if len(seen) > maxShared {
			t.Errorf("table %d holds %d values", i, len(seen))
		}
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
