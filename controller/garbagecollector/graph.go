package garbagecollector

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// node is what the collector knows of one object: who it is, who owns it, and whether it is
// being deleted and with which of the collector's finalizers.
type node struct {
	uid        types.UID
	kind       schema.GroupVersionKind
	namespace  string
	name       string
	owners     []metav1.OwnerReference
	deleting   bool // deletionTimestamp set
	finalizers []string
}

func (n *node) has(finalizer string) bool { return slices.Contains(n.finalizers, finalizer) }

// waitingForDependents: marked for foreground deletion, so its dependents go first.
func (n *node) waitingForDependents() bool {
	return n.deleting && n.has(metav1.FinalizerDeleteDependents)
}

// ownerRef returns n's reference to owner, if it has one.
func (n *node) ownerRef(owner types.UID) (metav1.OwnerReference, bool) {
	for _, r := range n.owners {
		if r.UID == owner {
			return r, true
		}
	}
	return metav1.OwnerReference{}, false
}

// blocks reports whether n holds back the foreground deletion of owner.
func (n *node) blocks(owner types.UID) bool {
	r, ok := n.ownerRef(owner)
	return ok && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion
}

// graph is the owner graph: every object seen, by UID, and for each owner UID (seen or not) the
// UIDs of the objects that name it. It is a plain state machine: upsert and remove return the
// UIDs whose state may now call for work, and the caller queues them. Safe for concurrent use.
type graph struct {
	mu         sync.Mutex
	nodes      map[types.UID]*node
	dependents map[types.UID]map[types.UID]struct{} // owner → dependents
}

func newGraph() *graph {
	return &graph{nodes: map[types.UID]*node{}, dependents: map[types.UID]map[types.UID]struct{}{}}
}

// upsert records n's new state and returns the UIDs to look at: n itself when it has owners or
// a collector finalizer to act on, its dependents when it just started waiting for them, and
// the owners waiting for their dependents that n was or is a dependent of.
func (g *graph) upsert(n *node) []types.UID {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.nodes[n.uid]
	g.nodes[n.uid] = n
	var queue []types.UID
	if len(n.owners) > 0 || (n.deleting && (n.has(metav1.FinalizerOrphanDependents) || n.has(metav1.FinalizerDeleteDependents))) {
		queue = append(queue, n.uid)
	}
	if n.waitingForDependents() && (old == nil || !old.waitingForDependents()) {
		queue = append(queue, g.dependentsLocked(n.uid)...)
	}
	if old != nil {
		for _, r := range old.owners {
			if _, still := n.ownerRef(r.UID); !still {
				g.unlinkLocked(r.UID, n.uid)
				queue = g.appendWaitingLocked(queue, r.UID)
			}
		}
	}
	for _, r := range n.owners {
		g.linkLocked(r.UID, n.uid)
		queue = g.appendWaitingLocked(queue, r.UID)
	}
	return queue
}

// remove forgets the object uid and returns the UIDs to look at: its dependents (their owner is
// gone) and its owners waiting for their dependents.
func (g *graph) remove(uid types.UID) []types.UID {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[uid]
	if n == nil {
		return nil
	}
	delete(g.nodes, uid)
	queue := g.dependentsLocked(uid)
	for _, r := range n.owners {
		g.unlinkLocked(r.UID, uid)
		queue = g.appendWaitingLocked(queue, r.UID)
	}
	return queue
}

// get returns the node of uid and its dependents' nodes (copies are unnecessary: nodes are
// replaced, never changed, once in the graph).
func (g *graph) get(uid types.UID) (*node, []*node) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[uid]
	if n == nil {
		return nil, nil
	}
	var deps []*node
	for _, d := range g.dependentsLocked(uid) {
		if dn := g.nodes[d]; dn != nil {
			deps = append(deps, dn)
		}
	}
	return n, deps
}

// reaches reports whether to is among from's dependents, their dependents, and so on: whether
// a foreground wait of to on from would wait for itself.
func (g *graph) reaches(from, to types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[types.UID]bool{from: true}
	next := []types.UID{from}
	for len(next) > 0 {
		u := next[len(next)-1]
		next = next[:len(next)-1]
		for d := range g.dependents[u] {
			if d == to {
				return true
			}
			if !seen[d] {
				seen[d] = true
				next = append(next, d)
			}
		}
	}
	return false
}

// lookup returns the node of uid, or nil.
func (g *graph) lookup(uid types.UID) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nodes[uid]
}

func (g *graph) dependentsLocked(owner types.UID) []types.UID {
	var out []types.UID
	for d := range g.dependents[owner] {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func (g *graph) appendWaitingLocked(queue []types.UID, owner types.UID) []types.UID {
	if o := g.nodes[owner]; o != nil && o.waitingForDependents() && !slices.Contains(queue, owner) {
		queue = append(queue, owner)
	}
	return queue
}

func (g *graph) linkLocked(owner, dependent types.UID) {
	deps := g.dependents[owner]
	if deps == nil {
		deps = map[types.UID]struct{}{}
		g.dependents[owner] = deps
	}
	deps[dependent] = struct{}{}
}

func (g *graph) unlinkLocked(owner, dependent types.UID) {
	delete(g.dependents[owner], dependent)
	if len(g.dependents[owner]) == 0 {
		delete(g.dependents, owner)
	}
}

// ownerState is what the collector found out about one owner of a dependent.
type ownerState int

const (
	ownerSolid   ownerState = iota // exists (or cannot be checked): keep the dependent
	ownerGone                      // no object with that UID exists any more
	ownerWaiting                   // marked for foreground deletion: its dependents go first
)

// verdict is what to do with a dependent that is not itself being deleted.
type verdict struct {
	// detach: owner UIDs whose references are to be removed (the dependent stays).
	detach []types.UID
	// delete the dependent with this propagation policy ("" = nothing to delete).
	delete metav1.DeletionPropagation
}

// judge decides a dependent's fate from its owners' states (one per owner reference, in order)
// and whether it has dependents of its own. A dependent with a live owner stays and only drops
// its references to owners that are gone or waiting; one whose owners are all gone is deleted in
// the background (or as its own finalizers ask); one with an owner waiting for it is deleted, in
// the foreground when it has dependents itself so that the wait covers the whole tree.
func judge(n *node, states []ownerState, hasDependents bool) verdict {
	var solid, waiting bool
	var detach []types.UID
	for i, s := range states {
		switch s {
		case ownerSolid:
			solid = true
		case ownerWaiting:
			waiting = true
			detach = append(detach, n.owners[i].UID)
		case ownerGone:
			detach = append(detach, n.owners[i].UID)
		}
	}
	switch {
	case len(states) == 0:
		return verdict{}
	case solid:
		return verdict{detach: detach}
	case waiting && hasDependents:
		return verdict{delete: metav1.DeletePropagationForeground}
	case waiting:
		return verdict{delete: metav1.DeletePropagationBackground}
	case n.has(metav1.FinalizerOrphanDependents):
		return verdict{delete: metav1.DeletePropagationOrphan}
	case n.has(metav1.FinalizerDeleteDependents):
		return verdict{delete: metav1.DeletePropagationForeground}
	default:
		return verdict{delete: metav1.DeletePropagationBackground}
	}
}
