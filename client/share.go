package client

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/kplane/kplane/scheme"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// SharedParts, passed to List or Watch in its context (WithSharedParts), makes them decode objects
// for keeping unchanged, as an informer's cache does: parts that are the same from object to
// object are decoded once and shared (see sharer). Objects decoded so must not be modified, not
// even through their slices, maps and pointers. One SharedParts serves one object type and may
// serve many lists and watches; those of another type ignore it.
type SharedParts struct {
	once sync.Once
	typ  reflect.Type
	s    *sharer
}

type sharedPartsKey struct{}

// WithSharedParts returns ctx carrying sp for the watches started with it.
func WithSharedParts(ctx context.Context, sp *SharedParts) context.Context {
	return context.WithValue(ctx, sharedPartsKey{}, sp)
}

func sharedPartsFrom(ctx context.Context) *SharedParts {
	sp, _ := ctx.Value(sharedPartsKey{}).(*SharedParts)
	return sp
}

// sharerFor returns the sharer for objects of type typ (the struct), nil if there is none.
func (sp *SharedParts) sharerFor(typ reflect.Type) *sharer {
	if sp == nil {
		return nil
	}
	sp.once.Do(func() { sp.typ, sp.s = typ, newSharer(typ) })
	if sp.typ != typ {
		return nil
	}
	return sp.s
}

// Objects kept in a cache are mostly alike: the pods of one Deployment have the same containers,
// labels, tolerations and security context, byte for byte. A sharer decodes each such part once
// and gives every later object with the same encoding of it the same value, which roughly halves
// what a cache of such pods holds, and skips decoding those parts again.
//
// The parts shared are the slice, map and pointer fields directly inside an object's metadata
// and spec (a Pod's spec.containers, metadata.labels, spec.securityContext, ...), recognized by
// their encoded bytes. Objects decoded this way must not be changed, not even their shared parts'
// contents — the rule for objects in an informer's cache anyway; a DeepCopy is independent.

// A value is kept in its field's table only once its encoding has been seen twice (the first
// time, only a hash of it is noted), so that parts unlike in every object (a per-pod volume name,
// say) cost no more than a hash. Each table is bounded: when it holds maxShared values or
// maxSharedBytes of encodings, it starts over. Objects decoded earlier keep their values; only
// sharing with them stops.
const (
	maxShared      = 4096
	maxSharedBytes = 1 << 20
)

// sharer decodes the objects of one type with their parts shared; it is safe for concurrent use.
type sharer struct {
	plan   *sharePlan
	seed   maphash.Seed
	mu     sync.Mutex
	tables []table // per shareable field (sharePlan.fields)
}

type table struct {
	values map[string]reflect.Value // encoding → value
	bytes  int                      // of the encodings in values
	once   map[uint64]struct{}      // hashes of encodings seen once
}

// note records a value decoded from encoding, whose hash is hash.
func (t *table) note(encoding []byte, hash uint64, v reflect.Value) {
	if _, ok := t.once[hash]; !ok {
		if len(t.once) >= 4*maxShared {
			clear(t.once)
		}
		t.once[hash] = struct{}{}
		return
	}
	delete(t.once, hash)
	if len(t.values) >= maxShared || t.bytes+len(encoding) > maxSharedBytes {
		clear(t.values)
		t.bytes = 0
	}
	t.values[string(encoding)] = v
	t.bytes += len(encoding)
}

// sharePlan says where the shareable fields of a type are, found once from its protobuf tags.
type sharePlan struct {
	parts  []sharedPart
	fields []sharedField
}

// sharedPart is a struct field of the object (metadata, spec) whose own fields are shared.
type sharedPart struct {
	num   protowire.Number
	index int
	// fields maps a field number inside the part to its entry in sharePlan.fields (-1: not shared).
	fields []int
}

type sharedField struct {
	part, index int // the part's index in sharePlan.parts, the field's struct index in the part
}

var plans sync.Map // reflect.Type of the object struct → *sharePlan

func newSharer(objType reflect.Type) *sharer {
	p, ok := plans.Load(objType)
	if !ok {
		p, _ = plans.LoadOrStore(objType, planFor(objType))
	}
	plan := p.(*sharePlan)
	s := &sharer{plan: plan, seed: maphash.MakeSeed(), tables: make([]table, len(plan.fields))}
	for i := range s.tables {
		s.tables[i] = table{values: map[string]reflect.Value{}, once: map[uint64]struct{}{}}
	}
	return s
}

// planFor finds the shareable fields of objType (a struct such as corev1.Pod).
func planFor(objType reflect.Type) *sharePlan {
	plan := &sharePlan{}
	for i := range objType.NumField() {
		f := objType.Field(i)
		num := tagNumber(f)
		if num == 0 || f.Type.Kind() != reflect.Struct || (f.Name != "ObjectMeta" && f.Name != "Spec") {
			continue
		}
		part := sharedPart{num: num, index: i}
		for j := range f.Type.NumField() {
			inner := f.Type.Field(j)
			n := tagNumber(inner)
			switch inner.Type.Kind() {
			case reflect.Slice, reflect.Map, reflect.Pointer:
			default:
				continue
			}
			if n == 0 || inner.Name == "ManagedFields" {
				continue // dropped by informers anyway, and unlike from object to object
			}
			for len(part.fields) <= int(n) {
				part.fields = append(part.fields, -1)
			}
			part.fields[n] = len(plan.fields)
			plan.fields = append(plan.fields, sharedField{part: len(plan.parts), index: j})
		}
		plan.parts = append(plan.parts, part)
	}
	return plan
}

// tagNumber is a struct field's protobuf field number, 0 if it has none.
func tagNumber(f reflect.StructField) protowire.Number {
	tag := strings.Split(f.Tag.Get("protobuf"), ",")
	if len(tag) < 2 {
		return 0
	}
	n, err := strconv.Atoi(tag[1])
	if err != nil {
		return 0
	}
	return protowire.Number(n)
}

// span is where one shareable field's occurrences lie within an object's encoding.
type span struct {
	field      int // index into sharePlan.fields
	start, end int // offsets into the object's encoding
	hit        reflect.Value
	missed     bool   // decoded here: hit is then the decoded value, to note in the table
	hash       uint64 // of the encoding, if missed
}

// scratch is a decoding goroutine's reusable space.
type scratch struct {
	buf   []byte
	spans []span
}

// unmarshal decodes raw (an object's own encoding) into msg, a new object whose struct value is
// obj, taking the parts seen before from the tables and skipping their bytes.
func (s *sharer) unmarshal(raw []byte, msg message, obj reflect.Value, sc *scratch) error {
	spans, ok := s.find(raw, sc.spans[:0])
	sc.spans = spans
	if !ok || len(spans) == 0 {
		return msg.Unmarshal(raw)
	}
	s.mu.Lock()
	hits := 0
	for i := range spans {
		if v, ok := s.tables[spans[i].field].values[string(raw[spans[i].start:spans[i].end])]; ok {
			spans[i].hit = v
			hits++
		}
	}
	s.mu.Unlock()
	data := raw
	if hits > 0 {
		sc.buf = s.without(raw, spans, sc.buf[:0])
		data = sc.buf
	}
	if err := msg.Unmarshal(data); err != nil {
		return err
	}
	for i, sp := range spans {
		f := s.plan.fields[sp.field]
		v := obj.Field(s.plan.parts[f.part].index).Field(f.index)
		if sp.hit.IsValid() {
			v.Set(sp.hit)
			continue
		}
		spans[i].hit = reflect.ValueOf(v.Interface()) // a copy: not tied to this object
		spans[i].missed = true
		spans[i].hash = maphash.Bytes(s.seed, raw[sp.start:sp.end])
	}
	if hits == len(spans) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range spans {
		if sp.missed {
			s.tables[sp.field].note(raw[sp.start:sp.end], sp.hash, sp.hit)
		}
	}
	return nil
}

// find locates each shareable field in raw. A field is shareable in this object only if its
// occurrences (the elements of a list, the entries of a map) are next to each other and its part
// occurs once, as every Kubernetes encoder writes them; ok is false otherwise, or if raw is not a
// well-formed message: then nothing is shared.
func (s *sharer) find(raw []byte, spans []span) ([]span, bool) {
	var partsSeen uint64 // bit i: part i seen
	for off := 0; off < len(raw); {
		num, typ, n := protowire.ConsumeTag(raw[off:])
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[off+n:])
		if m < 0 {
			return nil, false
		}
		if typ == protowire.BytesType {
			for pi := range s.plan.parts {
				if s.plan.parts[pi].num == num {
					if partsSeen&(1<<pi) != 0 {
						// A part written twice is merged by decoding (lists appended): a span
						// of either would not stand for the decoded value. Legal, but no
						// Kubernetes encoder does it, so such an object is decoded plainly.
						return nil, false
					}
					partsSeen |= 1 << pi
					_, l := protowire.ConsumeVarint(raw[off+n:])
					var good bool
					if spans, good = s.findIn(raw, off+n+l, off+n+m, pi, spans); !good {
						return nil, false
					}
				}
			}
		}
		off += n + m
	}
	return spans, true
}

// findIn adds the spans of part pi's shareable fields found in raw[start:end].
func (s *sharer) findIn(raw []byte, start, end, pi int, spans []span) ([]span, bool) {
	fields := s.plan.parts[pi].fields
	first := len(spans)
	last := -1 // index in spans of the field whose run the previous occurrence belongs to
	for off := start; off < end; {
		num, typ, n := protowire.ConsumeTag(raw[off:end])
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[off+n:end])
		if m < 0 {
			return nil, false
		}
		f := -1
		if int(num) < len(fields) {
			f = fields[num]
		}
		switch {
		case f < 0:
			last = -1
		case last >= 0 && spans[last].field == f:
			spans[last].end = off + n + m
		default:
			for i := first; i < len(spans); i++ {
				if spans[i].field == f {
					// A second run of the same field: not contiguous, so not shared here.
					spans[i].end = -1
					f = -1
				}
			}
			if f >= 0 {
				spans = append(spans, span{field: f, start: off, end: off + n + m})
				last = len(spans) - 1
			} else {
				last = -1
			}
		}
		off += n + m
	}
	// Drop the runs disowned above.
	kept := spans[:first]
	for _, sp := range spans[first:] {
		if sp.end >= 0 {
			kept = append(kept, sp)
		}
	}
	return kept, true
}

// without re-encodes raw leaving out the spans that hit, fixing the length of each part they lie
// in; the result is built in buf. The spans are in encoding order.
func (s *sharer) without(raw []byte, spans []span, buf []byte) []byte {
	next := 0 // the first span not yet passed
	for off := 0; off < len(raw); {
		num, typ, n := protowire.ConsumeTag(raw[off:])
		m := protowire.ConsumeFieldValue(num, typ, raw[off+n:])
		end := off + n + m
		first := next
		size := 0
		for ; next < len(spans) && spans[next].end <= end; next++ {
			if spans[next].hit.IsValid() {
				size += spans[next].end - spans[next].start
			}
		}
		if size == 0 {
			buf = append(buf, raw[off:end]...)
			off = end
			continue
		}
		_, l := protowire.ConsumeVarint(raw[off+n:])
		from := off + n + l
		buf = append(buf, raw[off:off+n]...)
		buf = protowire.AppendVarint(buf, uint64(end-from-size))
		for _, sp := range spans[first:next] {
			if sp.hit.IsValid() {
				buf = append(buf, raw[from:sp.start]...)
				from = sp.end
			}
		}
		buf = append(buf, raw[from:end]...)
		off = end
	}
	return buf
}

// decodeSharedList decodes a protobuf list (ListMeta = 1, items = 2 in every Kubernetes list
// type; list is a new one of the right kind) item by item with share, so that its items share
// parts and are each their own allocation rather than one array that any single item keeps
// alive. It reports false for anything it does not handle, which the caller then decodes whole.
func decodeSharedList[T Object](data []byte, list runtime.Object, share *sharer) (*List[T], bool, error) {
	if !bytes.HasPrefix(data, protobufMagic) || !isProtobufList(reflect.TypeOf(list).Elem()) {
		return nil, false, nil
	}
	e, err := parseEnvelope(data[len(protobufMagic):])
	if err != nil || e.encoded {
		return nil, false, nil
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(list)
	if err != nil || string(e.kind) != gvks[0].Kind || !isAPIVersion(e.apiVersion, gvks[0].Group, gvks[0].Version) {
		return nil, false, nil
	}
	out := &List[T]{}
	var meta metav1.ListMeta
	var sc scratch
	err = fields(e.raw, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return meta.Unmarshal(v)
		case 2:
			var zero T
			obj := reflect.New(reflect.TypeOf(zero).Elem())
			item := obj.Interface().(T)
			msg, ok := any(item).(message)
			if !ok {
				return fmt.Errorf("%T has no protobuf decoding", item)
			}
			if err := share.unmarshal(v, msg, obj.Elem(), &sc); err != nil {
				return err
			}
			out.Items = append(out.Items, item)
		}
		return nil
	})
	if err != nil {
		return nil, true, fmt.Errorf("client: decode %s: %w", gvks[0].Kind, err)
	}
	out.ResourceVersion, out.Continue = meta.ResourceVersion, meta.Continue
	return out, true, nil
}

// isProtobufList reports whether a list type has the usual layout: ListMeta as field 1 and
// Items as field 2.
func isProtobufList(t reflect.Type) bool {
	meta, ok := t.FieldByName("ListMeta")
	items, ok2 := t.FieldByName("Items")
	return ok && ok2 && tagNumber(meta) == 1 && tagNumber(items) == 2
}
