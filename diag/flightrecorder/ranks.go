package flightrecorder

import "slices"

// rankIndex numbers a set of ranks 0..n-1, so that per-rank arrays have
// one slot per rank present instead of one per rank number up to the
// largest: a dump that names rank 10^8 next to rank 0 costs two slots. The
// lookup is an array read when the ranks are dense enough (the usual
// 0..world-1), a map read otherwise.
type rankIndex struct {
	dense  []int32 // by rank number, -1 when absent; nil when sparse
	sparse map[int]int32
	n      int
}

// newRankIndex indexes the union of the given rank lists.
func newRankIndex(lists ...[]int) *rankIndex {
	var all []int
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	x := &rankIndex{n: len(all)}
	if len(all) == 0 {
		return x
	}
	// Dense while the array costs at most a few times the ranks present.
	if top := all[len(all)-1]; all[0] >= 0 && top < 4*len(all)+1024 {
		x.dense = make([]int32, top+1)
		for i := range x.dense {
			x.dense[i] = -1
		}
		for i, r := range all {
			x.dense[r] = int32(i)
		}
		return x
	}
	x.sparse = make(map[int]int32, len(all))
	for i, r := range all {
		x.sparse[r] = int32(i)
	}
	return x
}

// of returns r's number, or -1 when r is not in the set.
func (x *rankIndex) of(r int) int {
	if x.dense != nil {
		if r >= 0 && r < len(x.dense) {
			return int(x.dense[r])
		}
		return -1
	}
	if i, ok := x.sparse[r]; ok {
		return int(i)
	}
	return -1
}
