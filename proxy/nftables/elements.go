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

type owner struct {
	name  proxy.ServicePortName
	value string
}

// elements tracks the shared maps and sets: which service ports want each element (several
// may: ports of one service share a ClusterIP, services may share an endpoint), and what the
// kernel holds, so that a sync sends only the elements whose value changes.
type elements struct {
	owners     map[elemKey][]owner
	programmed map[elemKey]string
	dirty      map[elemKey]bool
}

func newElements() *elements {
	return &elements{owners: map[elemKey][]owner{}, programmed: map[elemKey]string{}, dirty: map[elemKey]bool{}}
}

// set replaces the elements service port n wants: old by new.
func (e *elements) set(n proxy.ServicePortName, old, new []elem) {
	for _, el := range old {
		k := elemKey{el.container, el.key}
		owners := e.owners[k]
		for i := range owners {
			if owners[i].name == n {
				owners = append(owners[:i], owners[i+1:]...)
				break
			}
		}
		if len(owners) == 0 {
			delete(e.owners, k)
		} else {
			e.owners[k] = owners
		}
		e.dirty[k] = true
	}
	for _, el := range new {
		k := elemKey{el.container, el.key}
		e.owners[k] = append(e.owners[k], owner{n, el.value})
		e.dirty[k] = true
	}
}

// want is the value the element should have, and whether it should exist. When owners
// disagree (two services claiming one external IP and port), the first name wins.
func (e *elements) want(k elemKey) (string, bool) {
	owners := e.owners[k]
	if len(owners) == 0 {
		return "", false
	}
	best := owners[0]
	for _, o := range owners[1:] {
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
	for _, k := range slices.SortedFunc(maps.Keys(e.dirty), compareElemKeys) {
		value, ok := e.want(k)
		old, had := e.programmed[k]
		switch {
		case ok && had && old == value:
		case ok:
			if had {
				tx.Delete(element(k, old))
			}
			tx.Add(element(k, value))
			e.programmed[k] = value
		case had:
			tx.Delete(element(k, old))
			delete(e.programmed, k)
		}
	}
	clear(e.dirty)
}

// addAll adds every wanted element to tx, for a sync that has flushed the containers.
func (e *elements) addAll(tx *knftables.Transaction) {
	clear(e.programmed)
	for _, k := range sortedKeys(e.owners) {
		value, _ := e.want(k)
		tx.Add(element(k, value))
		e.programmed[k] = value
	}
	clear(e.dirty)
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
