package job

import (
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// noIndex is the completion index of a pod without a valid one.
const noIndex = -1

// indexSet is a set of completion indexes as sorted, disjoint, non-adjacent intervals: the
// form of status.completedIndexes and status.failedIndexes ("1,3-5,7").
type indexSet []interval

type interval struct{ first, last int }

// parseIndexSet reads an index list the controller wrote, ignoring what it cannot read and
// indexes at or beyond completions (the list of a Job whose completions shrank).
func parseIndexSet(s string, completions int) indexSet {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for i := max(first, 0); i <= last && i < completions; i++ {
			out = append(out, i)
		}
	}
	return newIndexSet(out)
}

// newIndexSet builds the set of the given indexes (any order, duplicates allowed).
func newIndexSet(ix []int) indexSet {
	ix = slices.Clone(ix)
	slices.Sort(ix)
	ix = slices.Compact(ix)
	var s indexSet
	for _, i := range ix {
		if n := len(s); n > 0 && s[n-1].last+1 == i {
			s[n-1].last = i
			continue
		}
		s = append(s, interval{i, i})
	}
	return s
}

func (s indexSet) has(i int) bool {
	j, found := slices.BinarySearchFunc(s, i, func(iv interval, i int) int {
		switch {
		case iv.last < i:
			return -1
		case iv.first > i:
			return 1
		}
		return 0
	})
	return found && j < len(s)
}

func (s indexSet) total() int {
	n := 0
	for _, iv := range s {
		n += iv.last - iv.first + 1
	}
	return n
}

// with returns s and the indexes ix.
func (s indexSet) with(ix ...int) indexSet {
	if len(ix) == 0 {
		return s
	}
	return newIndexSet(append(s.list(), ix...))
}

func (s indexSet) list() []int {
	var out []int
	for _, iv := range s {
		for i := iv.first; i <= iv.last; i++ {
			out = append(out, i)
		}
	}
	return out
}

func (s indexSet) String() string {
	parts := make([]string, len(s))
	for i, iv := range s {
		parts[i] = strconv.Itoa(iv.first)
		if iv.last > iv.first {
			parts[i] += "-" + strconv.Itoa(iv.last)
		}
	}
	return strings.Join(parts, ",")
}

// completionIndex is the index a pod of an Indexed Job runs, from its annotation; noIndex
// when it has none or it is not a number.
func completionIndex(p *corev1.Pod) int {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return noIndex
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || strconv.Itoa(i) != v {
		return noIndex
	}
	return i
}

// pendingIndexes returns up to n of the indexes below completions that have neither
// succeeded (done), nor failed for good (failed), nor a pod running them now, lowest first.
func pendingIndexes(n, completions int, done, failed indexSet, running map[int]bool) []int {
	var out []int
	for i := 0; i < completions && len(out) < n; i++ {
		if !done.has(i) && !failed.has(i) && !running[i] {
			out = append(out, i)
		}
	}
	return out
}
