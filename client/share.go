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
// The parts shared are the slice, map, pointer and string fields inside an object's metadata and
// spec (a Pod's spec.containers, metadata.labels, spec.securityContext, spec.schedulerName, ...),
// recognized by their encoded bytes: those directly inside are skipped when decoding. Where such a
// field is not shared as a whole but holds messages (a container list that differs only in one
// volume mount, as pods with a per-pod service account token volume do), the parts inside its
// messages are shared too, level by level, after decoding. Fields that are different in every
// object (name, uid, resourceVersion) and managedFields (dropped by informers) are left alone.
//
// Objects decoded this way must not be changed, not even their shared parts' contents — the rule
// for objects in an informer's cache anyway; a DeepCopy is independent. Shared slices have no
// spare capacity, so an append to one makes a new array rather than writing into another
// object's.

// A value is kept in its field's table only once its encoding has been seen in two different
// objects (the first time, only a hash of it and of the object is noted), so that parts unlike
// in every object cost no more than a hash, and an object seen again (an update) does not make
// its own parts look common. What the tables hold is bounded for the whole sharer: at most
// maxShared values in one table, maxSharedBytes of encodings and maxNoted hashes in all of them;
// past that, every table starts over. Objects decoded earlier keep their values; only sharing
// with them stops.
const (
	maxShared      = 4096
	maxSharedBytes = 4 << 20
	maxNoted       = 1 << 16
	maxDepth       = 8 // levels of messages looked into below metadata and spec
)

// sharer decodes the objects of one type with their parts shared; it is safe for concurrent use.
type sharer struct {
	plan   *sharePlan
	seed   maphash.Seed
	mu     sync.Mutex
	tables []table // by leaf.table
	bytes  int     // of the encodings in all tables
	noted  int     // hashes in all tables
}

type table struct {
	values map[string]reflect.Value // encoding → value
	once   map[uint64]uint64        // hash of an encoding seen once → hash of its object
}

// note records v, a value decoded from encoding (whose hash is hash) in the object owner, in
// table t. The caller holds s.mu.
func (s *sharer) note(t int, encoding []byte, hash, owner uint64, v reflect.Value) {
	tb := &s.tables[t]
	if first, ok := tb.once[hash]; !ok || first == owner {
		if !ok {
			if s.noted >= maxNoted {
				s.reset()
			}
			tb.once[hash] = owner
			s.noted++
		}
		return
	}
	delete(tb.once, hash)
	s.noted--
	if len(tb.values) >= maxShared || s.bytes+len(encoding) > maxSharedBytes {
		s.reset()
	}
	tb.values[string(encoding)] = v
	s.bytes += len(encoding)
}

// reset empties every table.
func (s *sharer) reset() {
	for i := range s.tables {
		clear(s.tables[i].values)
		clear(s.tables[i].once)
	}
	s.bytes, s.noted = 0, 0
}

// clipped returns v, a value about to be shared, with a slice's capacity cut to its length: an
// append to one object's slice must not write into the spare room another object shares.
func clipped(v reflect.Value) reflect.Value {
	if v.Kind() == reflect.Slice && v.Cap() > v.Len() {
		return v.Slice3(0, v.Len(), v.Len())
	}
	return v
}

// sharePlan says where the shareable fields of an object type are, found once from the
// protobuf tags of its struct types.
type sharePlan struct {
	parts  []sharedPart // the object's metadata and spec
	tables int          // how many tables its leaves number
}

type sharedPart struct {
	num   protowire.Number
	index int // struct field index in the object
	plan  *structPlan
}

// structPlan is one struct type's fields that take part in sharing, by protobuf field number.
type structPlan struct {
	leaves []*leaf
}

func (p *structPlan) leaf(num protowire.Number) *leaf {
	if int(num) < len(p.leaves) {
		return p.leaves[num]
	}
	return nil
}

// leaf is a field of a struct: a shared one (slice, map, pointer, string) with its table, or a
// struct value (table -1) looked into. inner, if set, is the plan of the messages it holds.
type leaf struct {
	index int
	table int
	inner *structPlan
}

// unlike are ObjectMeta fields that differ from object to object or are dropped anyway.
var unlike = map[string]bool{"Name": true, "UID": true, "ResourceVersion": true, "SelfLink": true, "ManagedFields": true}

var plans sync.Map // reflect.Type of the object struct → *sharePlan

func newSharer(objType reflect.Type) *sharer {
	p, ok := plans.Load(objType)
	if !ok {
		p, _ = plans.LoadOrStore(objType, planFor(objType))
	}
	plan := p.(*sharePlan)
	s := &sharer{plan: plan, seed: maphash.MakeSeed(), tables: make([]table, plan.tables)}
	for i := range s.tables {
		s.tables[i] = table{values: map[string]reflect.Value{}, once: map[uint64]uint64{}}
	}
	return s
}

// planFor finds the shareable fields of objType (a struct such as corev1.Pod).
func planFor(objType reflect.Type) *sharePlan {
	b := planBuilder{memo: map[reflect.Type]*structPlan{}}
	plan := &sharePlan{}
	for i := range objType.NumField() {
		f := objType.Field(i)
		num := tagNumber(f)
		if num == 0 || f.Type.Kind() != reflect.Struct || (f.Name != "ObjectMeta" && f.Name != "Spec") {
			continue
		}
		plan.parts = append(plan.parts, sharedPart{num: num, index: i, plan: b.structPlan(f.Type)})
	}
	plan.tables = b.tables
	return plan
}

type planBuilder struct {
	tables int
	memo   map[reflect.Type]*structPlan // also ends recursive types
}

func (b *planBuilder) structPlan(t reflect.Type) *structPlan {
	if p, ok := b.memo[t]; ok {
		return p
	}
	p := &structPlan{}
	b.memo[t] = p
	for j := range t.NumField() {
		f := t.Field(j)
		num := tagNumber(f)
		if num == 0 || !f.IsExported() || (t == objectMetaType && unlike[f.Name]) {
			continue
		}
		l := &leaf{index: j, table: -1}
		switch f.Type.Kind() {
		case reflect.Struct:
			if l.inner = b.structPlan(f.Type); len(l.inner.leaves) == 0 {
				continue // nothing to share inside (a metav1.Time, say)
			}
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.String:
			l.table = b.tables
			b.tables++
			if e := f.Type; (e.Kind() == reflect.Slice || e.Kind() == reflect.Pointer) && e.Elem().Kind() == reflect.Struct {
				if l.inner = b.structPlan(e.Elem()); len(l.inner.leaves) == 0 {
					l.inner = nil
				}
			}
		default:
			continue
		}
		for len(p.leaves) <= int(num) {
			p.leaves = append(p.leaves, nil)
		}
		p.leaves[num] = l
	}
	return p
}

var objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()

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

// span is where one planned field's occurrences lie within a message's encoding.
type span struct {
	part       int // index into sharePlan.parts, for the object's own spans
	leaf       *leaf
	start, end int // offsets into the encoding
	count      int // occurrences
	hit        reflect.Value
	missed     bool   // decoded here: hit is then the decoded value, to note in the table
	hash       uint64 // of the encoding, if missed
}

// scratch is a decoding goroutine's reusable space.
type scratch struct {
	buf   []byte
	spans []span
	inner []span // for the levels below, used as a stack
}

// unmarshal decodes raw (an object's own encoding) into msg, a new object whose struct value is
// obj, taking the parts seen before from the tables and skipping their bytes.
func (s *sharer) unmarshal(raw []byte, msg message, obj reflect.Value, sc *scratch) error {
	spans, ok := s.find(raw, sc.spans[:0])
	if !ok || len(spans) == 0 {
		return msg.Unmarshal(raw)
	}
	sc.spans = spans
	defer clear(spans) // no values of this object kept in the scratch space
	s.mu.Lock()
	hits := 0
	for i := range spans {
		if spans[i].leaf.table < 0 {
			continue
		}
		if v, ok := s.tables[spans[i].leaf.table].values[string(raw[spans[i].start:spans[i].end])]; ok {
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
		v := obj.Field(s.plan.parts[sp.part].index).Field(sp.leaf.index)
		if sp.hit.IsValid() {
			v.Set(sp.hit)
			continue
		}
		spans[i].hit = v
		spans[i].missed = true
		if sp.leaf.table >= 0 {
			spans[i].hash = maphash.Bytes(s.seed, raw[sp.start:sp.end])
		}
	}
	if hits == len(spans) {
		return nil
	}
	owner := ownerHash(s.seed, obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range spans {
		if !sp.missed {
			continue
		}
		// What was decoded here may still hold parts seen before, a level down.
		s.shareWithin(raw[sp.start:sp.end], sp.count, sp.hit, sp.leaf, 1, owner, sc)
		if sp.leaf.table >= 0 {
			sp.hit.Set(clipped(sp.hit))
			s.note(sp.leaf.table, raw[sp.start:sp.end], sp.hash, owner, reflect.ValueOf(sp.hit.Interface()))
		}
	}
	return nil
}

// ownerHash identifies the object obj (a struct with metadata) for the tables.
func ownerHash(seed maphash.Seed, obj reflect.Value) uint64 {
	m, ok := obj.Addr().Interface().(metav1.Object)
	if !ok {
		return 0
	}
	if uid := m.GetUID(); uid != "" {
		return maphash.String(seed, string(uid))
	}
	return maphash.String(seed, m.GetNamespace()+"/"+m.GetName())
}

// find locates the planned fields of the object's parts in raw. A field takes part only if its
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
					first := len(spans)
					var good bool
					if spans, good = runs(raw, off+n+l, off+n+m, s.plan.parts[pi].plan, spans); !good {
						return nil, false
					}
					for i := first; i < len(spans); i++ {
						spans[i].part = pi
					}
				}
			}
		}
		off += n + m
	}
	return spans, true
}

// runs appends the spans of plan's fields found in raw[start:end], each field's occurrences
// forming one run; a field whose occurrences are split by others is left out.
func runs(raw []byte, start, end int, plan *structPlan, spans []span) ([]span, bool) {
	first := len(spans)
	last := -1 // index in spans of the run the previous occurrence belongs to
	for off := start; off < end; {
		num, typ, n := protowire.ConsumeTag(raw[off:end])
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, raw[off+n:end])
		if m < 0 {
			return nil, false
		}
		l := plan.leaf(num)
		switch {
		case l == nil || typ != protowire.BytesType && l.table < 0:
			last = -1
		case last >= 0 && spans[last].leaf == l:
			spans[last].end = off + n + m
			spans[last].count++
		default:
			for i := first; i < len(spans); i++ {
				if spans[i].leaf == l {
					// A second run of the same field: not contiguous, so not shared here.
					spans[i].end = -1
					l = nil
				}
			}
			if l != nil {
				spans = append(spans, span{leaf: l, start: off, end: off + n + m, count: 1})
				last = len(spans) - 1
			} else {
				last = -1
			}
		}
		off += n + m
	}
	kept := spans[:first]
	for _, sp := range spans[first:] {
		if sp.end >= 0 {
			kept = append(kept, sp)
		}
	}
	return kept, true
}

// shareWithin shares the parts inside v, a value just decoded from enc (count occurrences of
// field l), level by level below it: the messages it holds (v's elements, what it points to, v
// itself for a struct) get their fields seen before set from the tables. The caller holds s.mu.
func (s *sharer) shareWithin(enc []byte, count int, v reflect.Value, l *leaf, depth int, owner uint64, sc *scratch) {
	if l.inner == nil || depth > maxDepth {
		return
	}
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() != count {
			return
		}
	case reflect.Pointer, reflect.Struct:
		if count != 1 || v.Kind() == reflect.Pointer && v.IsNil() {
			return // a message written twice is merged: its parts are not its occurrences'
		}
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
	default:
		return
	}
	for k, off := 0, 0; off < len(enc); k++ {
		_, typ, n := protowire.ConsumeTag(enc[off:])
		if n < 0 || typ != protowire.BytesType {
			return
		}
		body, m := protowire.ConsumeBytes(enc[off+n:])
		if m < 0 {
			return
		}
		elem := v
		if v.Kind() == reflect.Slice {
			elem = v.Index(k)
		}
		s.shareFields(body, elem, l.inner, depth, owner, sc)
		off += n + m
	}
}

// shareFields sets the fields of v (a struct just decoded from msg) whose encoding was seen
// before from the tables, notes the others, and goes a level down into what it decoded.
func (s *sharer) shareFields(msg []byte, v reflect.Value, plan *structPlan, depth int, owner uint64, sc *scratch) {
	base := len(sc.inner)
	spans, ok := runs(msg, 0, len(msg), plan, sc.inner)
	if !ok {
		return
	}
	sc.inner = spans
	for i := base; i < len(sc.inner); i++ {
		sp := sc.inner[i]
		f := v.Field(sp.leaf.index)
		enc := msg[sp.start:sp.end]
		if sp.leaf.table >= 0 {
			if hit, ok := s.tables[sp.leaf.table].values[string(enc)]; ok {
				f.Set(hit)
				continue
			}
			s.shareWithin(enc, sp.count, f, sp.leaf, depth+1, owner, sc)
			f.Set(clipped(f))
			s.note(sp.leaf.table, enc, maphash.Bytes(s.seed, enc), owner, reflect.ValueOf(f.Interface()))
			continue
		}
		s.shareWithin(enc, sp.count, f, sp.leaf, depth+1, owner, sc) // a struct value
	}
	sc.inner = sc.inner[:base]
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
	out := &List[T]{Items: []T{}}
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
