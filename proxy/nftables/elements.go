package nftables

import (
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/kplane/kplane/proxy"
)

// elemKey names one element of a shared map or set.
type elemKey struct{ container, key string }

// owner is a service port wanting an element, with the value it wants.
type owner struct {
	name  *portName
	value string
}

// portName is a service port's name, held once however many elements it owns (a name is 64
// bytes; a proxy at 10k services holds over 100k elements).
type portName struct {
	proxy.ServicePortName
	owned int // elements it owns
}

// entry is what is known of one element: who wants it, and what the kernel holds.
type entry struct {
	// owners want the element; nearly always one (several: ports of one service sharing a
	// ClusterIP, services sharing an endpoint).
	owners []owner
	// programmed is the value in the kernel when inKernel.
	programmed string
	inKernel   bool
	dirty      bool // touched since the last diff: in elements.dirty
}

// elements tracks the shared maps and sets: which service ports want each element (several
// may: ports of one service share a ClusterIP, services may share an endpoint), and what the
// kernel holds, so that a sync sends only the elements whose value changes. Everything about
// an element is in one entry of one map: at 10k services, three maps keyed alike (owners,
// programmed values, dirty keys) held ~50 MB; this holds about half as much.
type elements struct {
	entries map[elemKey]*entry
	names   map[proxy.ServicePortName]*portName
	dirty   []elemKey // touched since the last diff, once each
}

func newElements() *elements {
	return &elements{entries: map[elemKey]*entry{}, names: map[proxy.ServicePortName]*portName{}}
}

// touch marks the entry of k changed since the last diff.
func (e *elements) touch(k elemKey, en *entry) {
	if !en.dirty {
		en.dirty = true
		e.dirty = append(e.dirty, k)
	}
}

// set replaces the elements service port n wants: old by new.
func (e *elements) set(n proxy.ServicePortName, old, new []elem) {
	name := e.names[n]
	for _, el := range old {
		k := elemKey{el.container, el.key}
		en := e.entries[k]
		if en == nil || name == nil {
			continue
		}
		if i := slices.IndexFunc(en.owners, func(o owner) bool { return o.name == name }); i >= 0 {
			en.owners = slices.Delete(en.owners, i, i+1)
			name.owned--
		}
		e.touch(k, en)
	}
	if len(new) > 0 && name == nil {
		name = &portName{ServicePortName: n}
		e.names[n] = name
	}
	for _, el := range new {
		k := elemKey{el.container, el.key}
		en := e.entries[k]
		if en == nil {
			en = &entry{}
			e.entries[k] = en
		}
		en.owners = append(en.owners, owner{name, el.value})
		name.owned++
		e.touch(k, en)
	}
	if name != nil && name.owned == 0 {
		delete(e.names, n)
	}
}

// want is the value the element should have, and whether it should exist. When owners
// disagree (two services claiming one external IP and port), the first name wins.
func (en *entry) want() (string, bool) {
	if len(en.owners) == 0 {
		return "", false
	}
	best := en.owners[0]
	for _, o := range en.owners[1:] {
		if o.name.String() < best.name.String() {
			best = o
		}
	}
	return best.value, true
}

// diff adds to tx what brings the kernel's elements to the wanted ones for every element
// touched since the last diff, and records the result as programmed (the caller resets
// everything when the transaction fails).
func (e *elements) diff(tx *knftables.Transaction) {
	slices.SortFunc(e.dirty, compareElemKeys)
	for _, k := range e.dirty {
		en := e.entries[k]
		en.dirty = false
		value, ok := en.want()
		switch {
		case ok && en.inKernel && en.programmed == value:
		case ok:
			if en.inKernel {
				tx.Delete(element(k, en.programmed))
			}
			tx.Add(element(k, value))
			en.programmed, en.inKernel = value, true
		case en.inKernel:
			tx.Delete(element(k, en.programmed))
			en.programmed, en.inKernel = "", false
		}
		if !ok {
			delete(e.entries, k)
		}
	}
	e.dirty = nil
}

// addAll adds every wanted element to tx, for a sync that has flushed the containers.
func (e *elements) addAll(tx *knftables.Transaction) {
	for _, k := range slices.SortedFunc(maps.Keys(e.entries), compareElemKeys) {
		en := e.entries[k]
		en.dirty = false
		value, ok := en.want()
		if !ok {
			delete(e.entries, k)
			continue
		}
		tx.Add(element(k, value))
		en.programmed, en.inKernel = value, true
	}
	e.dirty = nil
}

func element(k elemKey, value string) *knftables.Element {
	el := &knftables.Element{Key: strings.Split(k.key, " . ")}
	if isMap(k.container) {
		el.Map = k.container
		el.Value = []string{value}
	} else {
		el.Set = k.container
	}
	return el
}
