package flightrecorder

import "slices"

// rankIndex numbers a set of ranks 0..n-1, so that per-rank arrays have
// one slot per rank present instead of one per rank number up to the
// largest: a dump that names rank 10^8 next to rank 0 costs two slots. The
// lookup is an array read when the ranks are dense enough (the usual
// 0..world-1, or a group's members 16376..16383), a map read otherwise.
type rankIndex struct {
	base   int     // the lowest rank
	dense  []int32 // by rank number - base, -1 when absent; nil when sparse
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
	if span := all[len(all)-1] - all[0]; span < 4*len(all)+1024 {
		x.base = all[0]
		x.dense = make([]int32, span+1)
		for i := range x.dense {
			x.dense[i] = -1
		}
		for i, r := range all {
			x.dense[r-x.base] = int32(i)
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
		if i := r - x.base; i >= 0 && i < len(x.dense) {
			return int(x.dense[i])
		}
		return -1
	}
	if i, ok := x.sparse[r]; ok {
		return int(i)
	}
	return -1
}

// rankPos maps ranks to list positions: fr_trace's found/candidate dicts.
// It is an array with one slot per rank of the engine (numbered by a
// rankIndex) plus the list of ranks set, so that a 1000-rank collective
// costs no hashing; the engine reuses two of them.
type rankPos struct {
	idx    *rankIndex
	direct bool    // pos is indexed by rank - idx.base (dense ranks), else by number in idx
	pos    []int32 // -1 when absent
	ranks  []int
}

func newRankPos(idx *rankIndex) *rankPos {
	rp := &rankPos{idx: idx}
	if idx.dense != nil {
		// Dense ranks: index by the rank number itself, as cheap as it gets
		// for the matcher's hot path and still a few slots per rank.
		rp.direct, rp.pos = true, make([]int32, len(idx.dense))
	} else {
		rp.pos = make([]int32, idx.n)
	}
	for i := range rp.pos {
		rp.pos[i] = -1
	}
	return rp
}

// slot is r's index in pos, or -1 when r is not one of the engine's ranks.
func (rp *rankPos) slot(r int) int {
	if rp.direct {
		if i := r - rp.idx.base; uint(i) < uint(len(rp.pos)) {
			return i
		}
		return -1
	}
	return rp.idx.of(r)
}

// set records rank r at position p. Every rank the engine meets is in its
// index (its lists and its groups' members).
func (rp *rankPos) set(r, p int) {
	i := rp.slot(r)
	if rp.pos[i] < 0 {
		rp.ranks = append(rp.ranks, r)
	}
	rp.pos[i] = int32(p)
}

func (rp *rankPos) has(r int) bool {
	i := rp.slot(r)
	return i >= 0 && rp.pos[i] >= 0
}

// at is r's position; r must be set.
func (rp *rankPos) at(r int) int { return int(rp.pos[rp.slot(r)]) }

func (rp *rankPos) len() int { return len(rp.ranks) }

func (rp *rankPos) reset() {
	for _, r := range rp.ranks {
		rp.pos[rp.slot(r)] = -1
	}
	rp.ranks = rp.ranks[:0]
}

// moveTo adds every rank to dst and empties rp.
func (rp *rankPos) moveTo(dst *rankPos) {
	for _, r := range rp.ranks {
		dst.set(r, rp.at(r))
	}
	rp.reset()
}

// listsByRank finds a rank's list through the engine's rankIndex: an array
// read for dense ranks. The replay asks for every member of a group at
// every collective, 16 M lookups at 4096 ranks.
type listsByRank struct {
	idx   *rankIndex
	lists []*rankList // by number in idx
}

func newListsByRank(idx *rankIndex, lists []*rankList) listsByRank {
	x := listsByRank{idx: idx, lists: make([]*rankList, idx.n)}
	for _, l := range lists {
		x.lists[idx.of(l.rank)] = l
	}
	return x
}

func (x listsByRank) get(r int) *rankList {
	if i := x.idx.of(r); i >= 0 {
		return x.lists[i]
	}
	return nil
}
