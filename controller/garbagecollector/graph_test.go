package garbagecollector

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func ref(uid string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + uid, UID: types.UID(uid), BlockOwnerDeletion: &block}
}

func obj(uid string, deleting bool, finalizers []string, owners ...metav1.OwnerReference) *node {
	return &node{uid: types.UID(uid), name: uid, namespace: "ns", owners: owners, deleting: deleting, finalizers: finalizers}
}

func TestJudge(t *testing.T) {
	orphan := []string{metav1.FinalizerOrphanDependents}
	fg := []string{metav1.FinalizerDeleteDependents}
	for _, tc := range []struct {
		name    string
		n       *node
		states  []ownerState
		hasDeps bool
		want    verdict
	}{
		{"no owners", obj("d", false, nil), nil, false, verdict{}},
		{"owner present", obj("d", false, nil, ref("a", false)), []ownerState{ownerSolid}, false, verdict{}},
		{"owner gone", obj("d", false, nil, ref("a", false)), []ownerState{ownerGone}, false, verdict{delete: metav1.DeletePropagationBackground}},
		{"all owners gone", obj("d", false, nil, ref("a", false), ref("b", true)), []ownerState{ownerGone, ownerGone}, true, verdict{delete: metav1.DeletePropagationBackground}},
		{"gone, own orphan finalizer", obj("d", false, orphan, ref("a", false)), []ownerState{ownerGone}, true, verdict{delete: metav1.DeletePropagationOrphan}},
		{"gone, own foreground finalizer", obj("d", false, fg, ref("a", false)), []ownerState{ownerGone}, false, verdict{delete: metav1.DeletePropagationForeground}},
		{"one gone, one present: detach", obj("d", false, nil, ref("a", false), ref("b", false)), []ownerState{ownerGone, ownerSolid}, false, verdict{detach: []types.UID{"a"}}},
		{"waiting and present: detach", obj("d", false, nil, ref("a", true), ref("b", false)), []ownerState{ownerWaiting, ownerSolid}, true, verdict{detach: []types.UID{"a"}}},
		{"waiting, no dependents", obj("d", false, nil, ref("a", true)), []ownerState{ownerWaiting}, false, verdict{delete: metav1.DeletePropagationBackground}},
		{"waiting, with dependents", obj("d", false, nil, ref("a", true)), []ownerState{ownerWaiting}, true, verdict{delete: metav1.DeletePropagationForeground}},
		{"waiting and gone", obj("d", false, nil, ref("a", true), ref("b", false)), []ownerState{ownerWaiting, ownerGone}, false, verdict{delete: metav1.DeletePropagationBackground}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(tc.n, tc.states, tc.hasDeps)
			if got.delete != tc.want.delete || !slices.Equal(got.detach, tc.want.detach) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestGraphQueue follows a sequence of informer events through the graph and checks which UIDs
// each one queues and which dependents each owner has afterwards.
func TestGraphQueue(t *testing.T) {
	fg := []string{metav1.FinalizerDeleteDependents}
	orphan := []string{metav1.FinalizerOrphanDependents}
	type step struct {
		upsert *node
		remove string
		queue  []types.UID
		deps   map[string][]types.UID // owner → dependents after the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"background: owner removed queues its dependents", []step{
			{upsert: obj("rs", false, nil), queue: nil},
			{upsert: obj("p1", false, nil, ref("rs", true)), queue: []types.UID{"p1"}, deps: map[string][]types.UID{"rs": {"p1"}}},
			{upsert: obj("p2", false, nil, ref("rs", false)), queue: []types.UID{"p2"}, deps: map[string][]types.UID{"rs": {"p1", "p2"}}},
			{remove: "rs", queue: []types.UID{"p1", "p2"}},
			{remove: "p1", queue: nil, deps: map[string][]types.UID{"rs": {"p2"}}},
			{remove: "p2", queue: nil, deps: map[string][]types.UID{"rs": nil}},
		}},
		{"dependent seen before its owner", []step{
			{upsert: obj("p", false, nil, ref("rs", false)), queue: []types.UID{"p"}, deps: map[string][]types.UID{"rs": {"p"}}},
			{upsert: obj("rs", false, nil), queue: nil},
		}},
		{"foreground: owner waits, dependents queued, owner queued as they go", []step{
			{upsert: obj("rs", false, nil)},
			{upsert: obj("p1", false, nil, ref("rs", true)), queue: []types.UID{"p1"}},
			{upsert: obj("p2", false, nil, ref("rs", true)), queue: []types.UID{"p2"}},
			{upsert: obj("rs", true, fg), queue: []types.UID{"rs", "p1", "p2"}},
			{upsert: obj("rs", true, fg), queue: []types.UID{"rs"}}, // no second fan-out
			{upsert: obj("p1", true, nil, ref("rs", true)), queue: []types.UID{"p1", "rs"}},
			{remove: "p1", queue: []types.UID{"rs"}},
			{upsert: obj("p2", false, nil), queue: []types.UID{"rs"}, deps: map[string][]types.UID{"rs": nil}}, // detached
		}},
		{"orphan: owner queued", []step{
			{upsert: obj("rs", false, nil)},
			{upsert: obj("p", false, nil, ref("rs", true)), queue: []types.UID{"p"}},
			{upsert: obj("rs", true, orphan), queue: []types.UID{"rs"}},
			{upsert: obj("p", false, nil), queue: nil, deps: map[string][]types.UID{"rs": nil}},
			{remove: "rs", queue: nil},
		}},
		{"remove of unknown uid", []step{{remove: "x", queue: nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph()
			for i, s := range tc.steps {
				var got []types.UID
				if s.upsert != nil {
					got = g.upsert(s.upsert)
				} else {
					got = g.remove(types.UID(s.remove))
				}
				if !slices.Equal(got, s.queue) {
					t.Fatalf("step %d: queued %v, want %v", i, got, s.queue)
				}
				for owner, want := range s.deps {
					g.mu.Lock()
					deps := g.dependentsLocked(types.UID(owner))
					g.mu.Unlock()
					if !slices.Equal(deps, want) {
						t.Fatalf("step %d: dependents of %s %v, want %v", i, owner, deps, want)
					}
				}
			}
		})
	}
}
