package flightrecorder

import "testing"

// TestRankIndex: a group's members far from rank 0 are still an array
// (the replay of a tensor-parallel group at 16376-16383 costs no map
// reads); a rank 10^8 next to rank 0 makes it a map, not 10^8 slots.
func TestRankIndex(t *testing.T) {
	tp := newRankIndex([]int{16383, 16376, 16380})
	if tp.dense == nil || len(tp.dense) != 8 || tp.of(16380) != 1 || tp.of(16377) != -1 || tp.of(0) != -1 || tp.of(20000) != -1 {
		t.Errorf("members 16376-16383: dense %v, of(16380) %d", tp.dense, tp.of(16380))
	}
	far := newRankIndex([]int{0, 100_000_000})
	if far.dense != nil || far.of(100_000_000) != 1 || far.of(5) != -1 {
		t.Errorf("ranks 0 and 10^8: dense %d slots", len(far.dense))
	}
	rp := newRankPos(tp)
	rp.set(16383, 7)
	if !rp.has(16383) || rp.at(16383) != 7 || rp.has(16376) || rp.has(3) {
		t.Errorf("rankPos over an offset index: %+v", rp)
	}
	lists := newListsByRank(tp, []*rankList{{rank: 16376}, {rank: 16383}})
	if lists.get(16383).rank != 16383 || lists.get(16380) != nil || lists.get(1) != nil {
		t.Error("listsByRank")
	}
}
