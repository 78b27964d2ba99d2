package flightrecorder

import (
	"slices"
	"strings"
	"testing"
)

// The F-scenarios of the reference (flight-recorder.md §6.3): fr_trace's
// verdict (parity) and ours (Analyze), side by side.

func pgByName(t *testing.T, r *Report, name string) PGReport {
	t.Helper()
	for _, pr := range r.ProcessGroups {
		if pr.PGName == name {
			return pr
		}
	}
	t.Fatalf("no group %q in report", name)
	return PGReport{}
}

func TestF1MissingRank(t *testing.T) {
	s := newScenario("2.8", 4).seqs(ranks(0, 1, 2, 3), 1, 3)
	for _, r := range ranks(0, 1, 3) {
		s.op(r, "nccl:all_reduce", 4, state("started"), frames("all_reduce", "train_step"))
		s.status(r, "0", 4, 4, 3)
	}
	s.status(2, "0", 3, 3, 3)
	p := Parity(s.list(), ParityOptions{})
	b := firstProblem(t, p)
	if b == nil || b.Header != "Not all ranks joining collective, sequence number: 4" || !slices.Equal(b.MissingRanks, []int{2}) {
		t.Fatalf("parity block %+v", b)
	}
	want := []string{"Not all ranks joining collective, sequence number: 4", "internal record id: 3", "group info: 0:default_pg",
		"collective: nccl:all_reduce", "missing ranks: {2}", "input sizes: [[1024]]", "output sizes: [[1024]]", "world size: 4",
		"expected ranks: {0, 1, 2, 3}", "collective state: started", "collective stack trace: \n all_reduce at train.py:10\ntrain_step at train.py:11"}
	if !slices.Equal(b.Lines, want) {
		t.Errorf("block lines\n%q\nwant\n%q", b.Lines, want)
	}
	r := Analyze(s.list(), Options{})
	pr := pgByName(t, r, "0")
	if pr.Verdict != VerdictMissingRanks || pr.CollectiveSeqID != 4 || !slices.Equal(pr.MissingRanks, []int{2}) || !slices.Equal(pr.CulpritRanks, []int{2}) {
		t.Fatalf("verdict %s seq %d missing %v culprits %v", pr.Verdict, pr.CollectiveSeqID, pr.MissingRanks, pr.CulpritRanks)
	}
	if !strings.Contains(pr.Finding.Line, "rank 2 completed #3 and never enqueued #4") {
		t.Errorf("finding line: %s", pr.Finding.Line)
	}
	if len(pr.LaggingRanks) == 0 || pr.LaggingRanks[0].Rank != 2 || pr.LaggingRanks[0].Source != "pg_status" {
		t.Errorf("lagging ranks: %+v", pr.LaggingRanks)
	}
	if !pr.FRTrace.Agrees {
		t.Errorf("fr_trace note disagrees: %+v", pr.FRTrace)
	}
}

func TestF2MissingDump(t *testing.T) {
	s := newScenario("2.8", 4).seqs(ranks(0, 1, 2, 3), 1, 3)
	for _, r := range ranks(0, 1, 3) {
		s.op(r, "nccl:all_reduce", 4, state("started"))
	}
	s.without(2)
	p := Parity(s.list(), ParityOptions{})
	if p.Aborted != "AssertionError: Missing dump files from ranks {2}" {
		t.Fatalf("abort %q", p.Aborted)
	}
	p = Parity(s.list(), ParityOptions{AllowIncompleteRanks: true})
	var cannot int
	for _, b := range p.Blocks {
		if b.Kind == BlockCannotDecide {
			cannot++
			if !strings.Contains(b.Header, "missed FR dumps from ranks ({2})") {
				t.Errorf("header %q", b.Header)
			}
		}
	}
	if cannot != 4 {
		t.Errorf("%d cannot-decide blocks, want 4 (seq 1-4)", cannot)
	}
	r := Analyze(s.list(), Options{})
	pr := pgByName(t, r, "0")
	if pr.Verdict != "UNDECIDED" || !slices.Equal(pr.MissingDumps, []int{2}) {
		t.Fatalf("verdict %s missing dumps %v: %s", pr.Verdict, pr.MissingDumps, pr.Finding.Line)
	}
	if !r.FRTrace.UsedAllowIncomplete {
		t.Error("fr_trace view should fall back to --allow-incomplete-ranks")
	}
}

func TestF3TypeMismatchTwoRanks(t *testing.T) {
	s := newScenario("2.8", 2).seqs(ranks(0, 1), 1, 4)
	s.op(0, "nccl:all_reduce", 5)
	s.op(1, "nccl:_all_gather_base", 5, in([]int64{1024}), out([]int64{2048}))
	b := firstProblem(t, Parity(s.list(), ParityOptions{}))
	if b == nil || b.Header != "Collective sequence number: 5 has errors" {
		t.Fatalf("block %+v", b)
	}
	if got := b.Lines[len(b.Lines)-2]; got != "error msg: Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: 'all_reduce' does not match found collective type: '_all_gather_base'" {
		t.Errorf("error line %q", got)
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != "COLLECTIVE_TYPE_MISMATCH" || pr.Finding.Kind != KindTypeDivergence || pr.Finding.Confidence != confidenceLow {
		t.Fatalf("%+v", pr.Finding)
	}
	if !slices.Equal(pr.CulpritRanks, []int{1}) || !strings.Contains(pr.Finding.Line, "tie") {
		t.Errorf("tie culprits %v line %s", pr.CulpritRanks, pr.Finding.Line)
	}
}

func TestF4MajorityCulprit(t *testing.T) {
	s := newScenario("2.8", 4).seqs(ranks(0, 1, 2, 3), 1, 2)
	s.op(0, "nccl:all_reduce", 3, inout([]int64{4, 5}))
	for _, r := range ranks(1, 2, 3) {
		s.op(r, "nccl:all_reduce", 3, inout([]int64{3, 4}))
	}
	b := firstProblem(t, Parity(s.list(), ParityOptions{}))
	if !slices.Equal(b.Culprits(), []int{1, 2, 3}) {
		t.Fatalf("fr_trace culprits %v", b.Culprits())
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != "SIZE_OR_SYNTAX_MISMATCH" || !slices.Equal(pr.CulpritRanks, []int{0}) {
		t.Fatalf("verdict %s culprits %v", pr.Verdict, pr.CulpritRanks)
	}
	if pr.FRTrace.Agrees || !strings.Contains(pr.FRTrace.Why, "majority") {
		t.Errorf("difference not documented: %+v", pr.FRTrace)
	}
}

func TestF5Dtype(t *testing.T) {
	s := newScenario("2.8", 2).seqs(ranks(0, 1), 1, 1)
	s.op(0, "nccl:all_reduce", 2)
	s.op(1, "nccl:all_reduce", 2, dtypes("BFloat16", "BFloat16"))
	b := firstProblem(t, Parity(s.list(), ParityOptions{}))
	want := "error msg: Culprit rank 1; Error type: COLLECTIVE_DTYPE_MISMATCH, Expected dtypes: '{'Float'}' does not match found dtype: '{'Float'}/{'BFloat16'}/{'BFloat16'}'"
	if b.Lines[len(b.Lines)-2] != want {
		t.Errorf("got %q", b.Lines[len(b.Lines)-2])
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != "COLLECTIVE_DTYPE_MISMATCH" || pr.Finding.Kind != KindDtypeMismatch {
		t.Errorf("%s %s", pr.Verdict, pr.Finding.Kind)
	}
}

func TestF10P2PInLargerGroup(t *testing.T) {
	s := newScenario("2.8", 4).seqs(ranks(0, 1, 2, 3), 1, 2)
	s.op(0, "nccl:send 0->1", 2, p2p(1), inout([]int64{4}))
	s.op(1, "nccl:recv 1<-0", 2, p2p(1), inout([]int64{4}))
	s.seqs(ranks(0, 1, 2, 3), 3, 3)
	b := firstProblem(t, Parity(s.list(), ParityOptions{}))
	if b == nil || b.Kind != BlockMissingRanks || !slices.Equal(b.MissingRanks, []int{2, 3}) {
		t.Fatalf("fr_trace should report ranks 2,3 missing for the send/recv: %+v", b)
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != VerdictOK || pr.FRTrace.Agrees || !strings.Contains(pr.FRTrace.Why, "false alarms") {
		t.Fatalf("verdict %s note %+v", pr.Verdict, pr.FRTrace)
	}
}

func TestF11BidirectionalBatch(t *testing.T) {
	s := newScenario("2.8", 2).seqs(ranks(0, 1), 1, 1)
	s.op(0, "nccl:send 0->1", 1, p2p(5), inout([]int64{4})).op(0, "nccl:recv 0<-1", 1, p2p(5), inout([]int64{4})).op(0, "nccl:coalesced", 1, p2p(5), inout())
	s.op(1, "nccl:recv 1<-0", 1, p2p(5), inout([]int64{4})).op(1, "nccl:send 1->0", 1, p2p(5), inout([]int64{4})).op(1, "nccl:coalesced", 1, p2p(5), inout())
	s.seqs(ranks(0, 1), 2, 3)
	p := Parity(s.list(), ParityOptions{})
	b := firstProblem(t, p)
	if b == nil || b.Kind != BlockP2PMismatch {
		t.Fatalf("fr_trace should fail the bidirectional batch: %+v", p.Lines)
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != VerdictOK {
		t.Fatalf("verdict %s: %s", pr.Verdict, pr.Finding.Line)
	}
}

func TestF12OneWayBatch(t *testing.T) {
	s := newScenario("2.8", 2)
	s.op(0, "nccl:send 0->1", 0, p2p(1), inout([]int64{4})).op(0, "nccl:coalesced", 0, p2p(1), inout())
	s.op(1, "nccl:recv 1<-0", 0, p2p(1), inout([]int64{4})).op(1, "nccl:coalesced", 0, p2p(1), inout())
	p := Parity(s.list(), ParityOptions{})
	if firstProblem(t, p) != nil || p.Passed != 1 {
		t.Fatalf("want one passing collective: %+v %q", p, p.Lines)
	}
	if pr := pgByName(t, Analyze(s.list(), Options{}), "0"); pr.Verdict != VerdictOK || !pr.FRTrace.Agrees {
		t.Fatalf("%s %+v", pr.Verdict, pr.FRTrace)
	}
}

func TestF13RingWrap(t *testing.T) {
	s := newScenario("2.8", 2)
	for q := int64(100); q < 2100; q++ {
		s.op(0, "nccl:all_reduce", q, rid(q))
	}
	for q := int64(102); q < 2102; q++ {
		s.op(1, "nccl:all_reduce", q, rid(q))
	}
	b := firstProblem(t, Parity(s.list(), ParityOptions{}))
	if b == nil || b.Kind != BlockMissingRanks || b.Seq != 2100 || !slices.Equal(b.MissingRanks, []int{0}) {
		t.Fatalf("%+v", b)
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != VerdictMissingRanks || pr.Window.First != 102 || pr.Finding.Confidence != confidenceLow {
		t.Fatalf("%s window %+v %s", pr.Verdict, pr.Window, pr.Finding.Line)
	}
}

func TestF14ShiftedRecordIDs(t *testing.T) {
	s := newScenario("2.8", 2).pg("9", "other", 1)
	for q := int64(1); q <= 2000; q++ {
		s.op(0, "nccl:all_reduce", q, rid(q+99))
		s.op(1, "nccl:all_reduce", q, rid(q+149)) // 50 ops on another group long ago
	}
	p := Parity(s.list(), ParityOptions{})
	b := firstProblem(t, p)
	if b == nil || b.Kind != BlockMissingRanks || !slices.Equal(b.MissingRanks, []int{0}) {
		t.Fatalf("fr_trace false alarm expected: %+v", b)
	}
	if !strings.HasPrefix(p.Aborted, "") || p.Blocks[len(p.Blocks)-1].Kind != BlockTooMany {
		t.Errorf("fr_trace should hit the mismatch cap")
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Verdict != VerdictOK || pr.Matched != 2000 {
		t.Fatalf("verdict %s matched %d: %s", pr.Verdict, pr.Matched, pr.Finding.Line)
	}
}

func TestF15CapStopsAll(t *testing.T) {
	s := newScenario("2.8", 2).seqs(ranks(0), 1, 20).seqs(ranks(1), 1, 4)
	p := Parity(s.list(), ParityOptions{})
	var missing int
	for _, b := range p.Blocks {
		if b.Kind == BlockMissingRanks {
			missing++
		}
	}
	last := p.Blocks[len(p.Blocks)-1]
	if missing != 11 || last.Kind != BlockTooMany || last.Header != "Too many mismatches for process_group 09000494312501845833: default_pg aborting" {
		t.Fatalf("%d blocks, last %q", missing, last.Header)
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if !strings.Contains(pr.Finding.Line, "rank 1 completed #4 and never enqueued #5") {
		t.Errorf("line %s", pr.Finding.Line)
	}
}

func TestF16MixedVersions(t *testing.T) {
	s := newScenario("2.10", 2).seqs(ranks(0, 1), 1, 3)
	s.dumps[1].Version, s.dumps[1].Minor = "2.8", 8
	p := Parity(s.list(), ParityOptions{})
	if p.Aborted != "AssertionError: Rank 1 has different version 2.8 from the given version 2.10" {
		t.Fatalf("%q", p.Aborted)
	}
	r := Analyze(s.list(), Options{})
	if r.Verdict != VerdictOK || !strings.Contains(strings.Join(r.DataQuality.Warnings, "\n"), "different format versions") {
		t.Fatalf("%s %v", r.Verdict, r.DataQuality.Warnings)
	}
}

func TestF18UnknownOp(t *testing.T) {
	s := newScenario("2.8", 2).seqs(ranks(0, 1), 1, 1)
	s.op(0, "nccl:allreduce_sparse", 2).op(1, "nccl:allreduce_sparse", 2)
	p := Parity(s.list(), ParityOptions{})
	if p.Aborted != "AssertionError: allreduce_sparse is not a supported operation" {
		t.Fatalf("%q", p.Aborted)
	}
	r := Analyze(s.list(), Options{})
	if r.Verdict != VerdictOK {
		t.Fatalf("%s", r.Verdict)
	}
}

func TestF19TimedOut(t *testing.T) {
	s := newScenario("2.8", 2).seqs(ranks(0, 1), 1, 6)
	s.op(0, "nccl:all_reduce", 7, state("scheduled"), retired()).op(1, "nccl:all_reduce", 7, state("scheduled"), retired())
	if b := firstProblem(t, Parity(s.list(), ParityOptions{})); b != nil {
		t.Fatalf("fr_trace passes it: %+v", b)
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Finding.Kind != KindTimedOut || pr.CollectiveSeqID != 7 {
		t.Fatalf("%+v", pr.Finding)
	}
}

func TestStuckEverywhere(t *testing.T) {
	s := newScenario("2.10", 4).seqs(ranks(0, 1, 2, 3), 1, 5)
	for _, r := range ranks(0, 1, 2, 3) {
		s.op(r, "nccl:all_reduce", 6, state("started"))
	}
	pr := pgByName(t, Analyze(s.list(), Options{}), "0")
	if pr.Finding.Kind != KindStuck || pr.Verdict != VerdictOK {
		t.Fatalf("%s %+v", pr.Verdict, pr.Finding)
	}
}

func TestPGFilterAndRanks(t *testing.T) {
	s := newScenario("2.10", 4).pg("1", "tp", 0, 1).pg("2", "tp", 2, 3).seqs(ranks(0, 1, 2, 3), 1, 2)
	s.op(0, "nccl:all_reduce", 1, onPG("1", "tp")).op(1, "nccl:all_reduce", 1, onPG("1", "tp"))
	r := Analyze(s.list(), Options{Ranks: []int{0}})
	if len(r.ProcessGroups) != 2 {
		t.Fatalf("%d groups", len(r.ProcessGroups))
	}
	r = Analyze(s.list(), Options{PG: "tp"})
	if len(r.ProcessGroups) != 2 {
		t.Fatalf("%d groups with desc tp", len(r.ProcessGroups))
	}
}
