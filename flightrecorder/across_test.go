package flightrecorder

import (
	"slices"
	"strings"
	"testing"
)

// tpScenario is a 4-rank tensor/data-parallel job as the eval's tp_gloo
// job runs it: each round a rank all-reduces in its tp pair (0-1, 2-3),
// then its dp pair (0,2 / 1,3), then the world. Rounds 1..done complete.
func tpScenario(done int64) *scenario {
	s := newScenario("2.10", 4).pg("1", "tp", 0, 1).pg("2", "tp", 2, 3).pg("3", "dp", 0, 2).pg("4", "dp", 1, 3)
	for q := int64(1); q <= done; q++ {
		for r := 0; r < 4; r++ {
			s.tpRound(r, q, "completed", true, true, true)
		}
	}
	return s
}

func tpOf(r int) string { return map[int]string{0: "1", 1: "1", 2: "2", 3: "2"}[r] }
func dpOf(r int) string { return map[int]string{0: "3", 2: "3", 1: "4", 3: "4"}[r] }

// tpRound appends rank r's collectives of round q: those asked for, in
// the job's order, each in state st.
func (s *scenario) tpRound(r int, q int64, st string, tp, dp, world bool) {
	if tp {
		s.op(r, "gloo:all_reduce", q, onPG(tpOf(r), "tp"), state(st))
	}
	if dp {
		s.op(r, "gloo:all_reduce", q, onPG(dpOf(r), "dp"), state(st))
	}
	if world {
		s.op(r, "gloo:all_reduce", q, state(st))
	}
}

func TestAcrossOrderBreach(t *testing.T) {
	// Round 9: rank 1 skips its tp all_reduce and goes on to dp (with rank
	// 3) and the world; rank 0 waits for it in tp, rank 2 for rank 0 in
	// dp, rank 3 for ranks 0 and 2 in the world. The group views blame
	// rank 1 (tp 0-1), rank 0 (dp 0,2) and ranks 0,2 (world).
	s := tpScenario(8)
	s.op(0, "gloo:all_reduce", 9, onPG("1", "tp"), state("scheduled"))
	s.op(1, "gloo:all_reduce", 9, onPG("4", "dp"))
	s.op(1, "gloo:all_reduce", 9, state("scheduled"))
	s.op(2, "gloo:all_reduce", 9, onPG("2", "tp"))
	s.op(2, "gloo:all_reduce", 9, onPG("3", "dp"), state("scheduled"))
	s.op(3, "gloo:all_reduce", 9, onPG("2", "tp"))
	s.op(3, "gloo:all_reduce", 9, onPG("4", "dp"))
	s.op(3, "gloo:all_reduce", 9, state("scheduled"))
	r := Analyze(s.list(), Options{})
	x := r.Across
	if x == nil || x.Kind != AcrossOrder || !slices.Equal(x.Culprits, []int{1}) || !slices.Equal(x.Victims, []int{0, 2}) {
		t.Fatalf("across: %+v\nsummary: %s", x, r.Summary)
	}
	for _, want := range []string{"Across the groups: rank 1 is in #9", "never enqueued #9 on pg ⟦1⟧ (⟦tp⟧)", "Culprit rank(s): 1.",
		"name ranks 0,2, which wait in other groups (victims, not culprits)"} {
		if !strings.Contains(r.Summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.Summary)
		}
	}
	if strings.Contains(r.Summary, "Culprit rank(s): 0") {
		t.Errorf("the summary still blames a victim:\n%s", r.Summary)
	}
}

func TestAcrossOutsideThroughGroups(t *testing.T) {
	// Round 9: rank 3 never starts it (stuck in its data loader); rank 2
	// waits for it in tp, rank 0 for rank 2 in dp, rank 1 for rank 3 in
	// dp. dp 0,2's view blames rank 2, which waits in tp.
	s := tpScenario(8)
	s.op(0, "gloo:all_reduce", 9, onPG("1", "tp"))
	s.op(0, "gloo:all_reduce", 9, onPG("3", "dp"), state("scheduled"))
	s.op(1, "gloo:all_reduce", 9, onPG("1", "tp"))
	s.op(1, "gloo:all_reduce", 9, onPG("4", "dp"), state("scheduled"))
	s.op(2, "gloo:all_reduce", 9, onPG("2", "tp"), state("scheduled"))
	r := Analyze(s.list(), Options{})
	x := r.Across
	if x == nil || x.Kind != AcrossOutside || !slices.Equal(x.Culprits, []int{3}) || !slices.Equal(x.Victims, []int{2}) || x.Waiting != 3 {
		t.Fatalf("across: %+v\nsummary: %s", x, r.Summary)
	}
	if !strings.Contains(x.Line, "rank 3 is in no collective that a peer has not entered too, and ranks 0-2 wait for it") {
		t.Errorf("line: %s", x.Line)
	}
	if !strings.Contains(r.Summary, "Culprit rank(s): 3.") || !strings.Contains(r.Summary, "name rank 2, which waits in other groups") {
		t.Errorf("summary: %s", r.Summary)
	}
}

func TestAcrossMissingDumpIsTheSink(t *testing.T) {
	s := tpScenario(8).without(3)
	s.op(0, "gloo:all_reduce", 9, onPG("1", "tp"))
	s.op(0, "gloo:all_reduce", 9, onPG("3", "dp"), state("scheduled"))
	s.op(2, "gloo:all_reduce", 9, onPG("2", "tp"), state("scheduled"))
	r := Analyze(s.list(), Options{})
	if x := r.Across; x == nil || !slices.Equal(x.Culprits, []int{3}) || !strings.Contains(x.Line, "rank 3 left no dump") {
		t.Fatalf("across: %+v", x)
	}
}

func TestAcrossAgreesSaysNothingNew(t *testing.T) {
	// One group, one rank missing: the group's verdict is the whole story
	// and the summary reads as before.
	s := newScenario("2.8", 4).seqs(ranks(0, 1, 2, 3), 1, 3)
	for _, r := range ranks(0, 1, 3) {
		s.op(r, "nccl:all_reduce", 4, state("started"))
	}
	r := Analyze(s.list(), Options{})
	if x := r.Across; x == nil || !slices.Equal(x.Culprits, []int{2}) || len(x.Victims) != 0 {
		t.Fatalf("across: %+v", x)
	}
	if strings.Contains(r.Summary, "Across the groups") || !strings.Contains(r.Summary, "Culprit rank(s): 2.") {
		t.Errorf("summary: %s", r.Summary)
	}
	// Filtered to a group, other groups are out of view: no reading.
	if f := Analyze(s.list(), Options{PG: "0"}); f.Across != nil {
		t.Errorf("filtered analysis has an across reading: %+v", f.Across)
	}
}

func TestAcrossCycleWithoutHistoryNamesNobody(t *testing.T) {
	// The first round already crosses: rank 0 enters tp then the world,
	// rank 1 the world then tp. Nothing earlier says whose order is
	// wrong, so nobody is named.
	s := newScenario("2.10", 2).pg("1", "tp", 0, 1)
	s.op(0, "gloo:all_reduce", 1, onPG("1", "tp"), state("scheduled"))
	s.op(1, "gloo:all_reduce", 1, state("scheduled"))
	r := Analyze(s.list(), Options{})
	x := r.Across
	if x == nil || x.Kind != AcrossCycle || len(x.Culprits) != 0 || !strings.Contains(x.Line, "cycle across groups (ranks 0-1)") {
		t.Fatalf("across: %+v", x)
	}
	if !strings.Contains(r.Summary, "No culprit named") {
		t.Errorf("summary: %s", r.Summary)
	}
}
