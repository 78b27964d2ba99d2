package diagnosis

import (
	"fmt"
	"reflect"
	"testing"
)

// job is 8 ranks, tensor-parallel pairs tp0..tp3 ({0,1}, {2,3}, ...) and
// the default group d, each round a tp all_reduce then a d all_reduce,
// five rounds done; round 6 is set up by the test.
func job(t *testing.T) Model {
	t.Helper()
	m := Model{Groups: map[string][]int{"d": {0, 1, 2, 3, 4, 5, 6, 7}}, Ranks: map[int]*Rank{}}
	for p := 0; p < 4; p++ {
		m.Groups[tp(p*2)] = []int{2 * p, 2*p + 1}
	}
	for r := 0; r < 8; r++ {
		rk := &Rank{Rank: r, Issued: map[string]int64{}}
		for s := int64(1); s <= 5; s++ {
			rk.History = append(rk.History, Op{tp(r), s, "all_reduce"}, Op{"d", s, "all_reduce"})
		}
		rk.Issued[tp(r)], rk.Issued["d"] = 5, 5
		m.Ranks[r] = rk
	}
	return m
}

func tp(r int) string { return fmt.Sprintf("tp%d", r/2) }

// enter puts rank r into op (as its current collective).
func enter(m Model, r int, g string, seq int64) {
	rk := m.Ranks[r]
	op := Op{g, seq, "all_reduce"}
	rk.History = append(rk.History, op)
	rk.Issued[g] = max(rk.Issued[g], seq)
	rk.Status, rk.In = InCollective, &op
}

// done: rank r entered and left op.
func done(m Model, r int, g string, seq int64) {
	enter(m, r, g, seq)
	m.Ranks[r].Status, m.Ranks[r].In = Running, nil
}

func check(t *testing.T, g Graph, kind string, culprits, collateral []int) {
	t.Helper()
	if len(g.Sinks) != 1 || g.Sinks[0].Kind != kind || !reflect.DeepEqual(g.Sinks[0].Ranks, culprits) {
		t.Fatalf("sinks %+v, want one %s %v", g.Sinks, kind, culprits)
	}
	if !reflect.DeepEqual(g.Collateral, collateral) {
		t.Errorf("collateral %v, want %v", g.Collateral, collateral)
	}
}

// TestSkippedSubgroupCollective is the victim-blamed case of issue 10:
// rank 3 skips its pair's all_reduce #6 and goes on to the default
// group's #6. Rank 2 waits for it in the pair; everyone else waits for
// rank 2 in the default group, where it never comes. Rank 3 is the
// culprit, rank 2 collateral, whatever is older.
func TestSkippedSubgroupCollective(t *testing.T) {
	m := job(t)
	for _, r := range []int{0, 1, 4, 5, 6, 7} {
		done(m, r, tp(r), 6)
		enter(m, r, "d", 6)
	}
	enter(m, 2, "tp1", 6)
	enter(m, 3, "d", 6)
	g := WaitFor(m)
	check(t, g, SinkDiverged, []int{3}, []int{0, 1, 2, 4, 5, 6, 7})
	if s := g.Sinks[0]; *s.At != (Op{"d", 6, "all_reduce"}) || *s.Skipped != (Op{"tp1", 6, "all_reduce"}) {
		t.Errorf("at %v, skipped %v", s.At, s.Skipped)
	}
}

// TestCPUStallBehindASubgroup: rank 3 is stuck on the CPU before its
// pair's #6; rank 2 waits for it there, the rest for rank 2 (and 3) in
// the default group. The default group alone shows 2 and 3 missing; the
// chain says 3.
func TestCPUStallBehindASubgroup(t *testing.T) {
	m := job(t)
	for _, r := range []int{0, 1, 4, 5, 6, 7} {
		done(m, r, tp(r), 6)
		enter(m, r, "d", 6)
	}
	enter(m, 2, "tp1", 6)
	check(t, WaitFor(m), SinkCPU, []int{3}, []int{0, 1, 2, 4, 5, 6, 7})
}

func TestDeadAndSilentRanks(t *testing.T) {
	m := job(t)
	for _, r := range []int{0, 1, 2, 3, 6, 7} {
		done(m, r, tp(r), 6)
		enter(m, r, "d", 6)
	}
	enter(m, 4, "tp2", 6)
	m.Ranks[5].Status = Dead
	check(t, WaitFor(m), SinkDead, []int{5}, []int{0, 1, 2, 3, 4, 6, 7})

	m = job(t)
	for r := 0; r < 8; r++ {
		if r != 6 {
			done(m, r, tp(r), 6)
			enter(m, r, "d", 6)
		}
	}
	m.Ranks[6].Status = NoEvidence
	check(t, WaitFor(m), SinkNoData, []int{6}, []int{0, 1, 2, 3, 4, 5, 7})
}

// TestAllInTheSameCollective: nobody is missing from the default group's
// #6: the hang is below the ranks (network, NCCL, a GPU), one sink.
func TestAllInTheSameCollective(t *testing.T) {
	m := job(t)
	for r := 0; r < 8; r++ {
		done(m, r, tp(r), 6)
		enter(m, r, "d", 6)
	}
	g := WaitFor(m)
	if len(g.Sinks) != 1 || g.Sinks[0].Kind != SinkAllIn || len(g.Sinks[0].Ranks) != 8 || g.Waiting != 0 {
		t.Fatalf("%+v", g)
	}
}

// TestNoHistoryNoAccusation: the same cycle as the skipped collective,
// but with too little history to know the program order: both are named,
// as undecided, rather than one guessed.
func TestNoHistoryNoAccusation(t *testing.T) {
	m := job(t)
	for r := range m.Ranks {
		m.Ranks[r].History = m.Ranks[r].History[8:] // one round left
	}
	for _, r := range []int{0, 1, 4, 5, 6, 7} {
		done(m, r, tp(r), 6)
		enter(m, r, "d", 6)
	}
	enter(m, 2, "tp1", 6)
	enter(m, 3, "d", 6)
	check(t, WaitFor(m), SinkUndecided, []int{2, 3}, []int{0, 1, 4, 5, 6, 7})
}

// TestUnsteadyRateNoAccusation: when the other group's pace per round
// changes, the expected position is unknown: no accusation.
func TestUnsteadyRateNoAccusation(t *testing.T) {
	h := []Op{{"d", 1, ""}, {"g", 1, ""}, {"d", 2, ""}, {"d", 3, ""}, {"g", 2, ""}, {"d", 4, ""}, {"g", 3, ""}}
	if skippedAhead(h, Op{"g", 3, ""}, "d", 5) {
		t.Error("accused on an unsteady rate")
	}
	// Two collectives of d per one of g, steadily: entering g #4 with d
	// at #6 (not #8) skipped d #7.
	h = []Op{{"d", 1, ""}, {"d", 2, ""}, {"g", 1, ""}, {"d", 3, ""}, {"d", 4, ""}, {"g", 2, ""}, {"d", 5, ""}, {"d", 6, ""}, {"g", 3, ""}, {"g", 4, ""}}
	if !skippedAhead(h, Op{"g", 4, ""}, "d", 7) {
		t.Error("a skipped collective at a 2:1 rate not seen")
	}
	if skippedAhead(h[:9], Op{"g", 3, ""}, "d", 7) {
		t.Error("accused a rank in order")
	}
}

func TestNothingWaits(t *testing.T) {
	m := job(t)
	if g := WaitFor(m); len(g.Sinks) != 0 || len(g.Edges) != 0 || g.Waiting != 0 {
		t.Errorf("%+v", g)
	}
}
