package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// rounds is a world-rank job of rounds all_reduces of 8 float32 bytes on
// the whole group, then the last round as last says per rank (nil: like
// the others, still running); read 200 s later.
func rounds(world, n int, last func(r int, row *evidence.CommRow)) Input {
	in := Input{World: world, Ranks: map[int]*RankFacts{}}
	var end int64
	for r := 0; r < world; r++ {
		ts := int64(1_700_000_000_000_000)
		for s := 1; s <= n; s++ {
			ts += 100_000
			row := evidence.CommRow{Rank: r, TimestampUS: ts, Op: "all_reduce", Ranks: "", GroupSeq: int64(s), DurationMS: 1,
				Shape: "(2,)", Dtype: "torch.float32", Bytes: 8}
			if s == n {
				row.DurationMS = -1
				if last != nil {
					last(r, &row)
				}
			}
			in.Comm = append(in.Comm, row)
		}
		end = max(end, ts)
		in.Ranks[r] = &RankFacts{Rank: r, Alive: true, Activity: &evidence.RankActivity{Rank: r, LastComm: ts}}
	}
	for _, f := range in.Ranks {
		f.NowNS = end*1000 + 200e9
	}
	return in
}

// TestMismatchSizesAndDtypes: every member inside the same collective
// (all in), one of them with another size, or another dtype: that member
// is the culprit, said with what each side called.
func TestMismatchSizesAndDtypes(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(row *evidence.CommRow)
		says   string
	}{
		{"size", func(row *evidence.CommRow) { row.Shape, row.Bytes = "(4,)", 16 }, "rank 2 called all_reduce (torch.float32, (4,), 16 bytes)"},
		{"dtype", func(row *evidence.CommRow) { row.Dtype = "torch.bfloat16" }, "rank 2 called all_reduce (torch.bfloat16"},
		{"op", func(row *evidence.CommRow) { row.Op = "reduce_scatter_tensor" }, "rank 2 called reduce_scatter_tensor"},
	} {
		in := rounds(4, 5, func(r int, row *evidence.CommRow) {
			if r == 2 {
				c.change(row)
			}
		})
		rep := Diagnose(in)
		h := rep.Hypotheses[0]
		if rep.State != StateStalled || h.Category != CatMismatch || h.Culprits != "2" || h.Collateral != "0-1,3" || h.Confidence != High ||
			!strings.Contains(allText(h), c.says) || !strings.Contains(allText(h), "ranks 0-1,3 called all_reduce") {
			t.Errorf("%s: %s\n%+v", c.name, rep.Summary, rep.Hypotheses)
		}
		if n := len(rep.Hypotheses); n != 1 {
			t.Errorf("%s: %d hypotheses", c.name, n)
		}
	}
	// The same calls everywhere: all in the collective, no mismatch.
	if h := Diagnose(rounds(4, 5, nil)).Hypotheses[0]; h.Category != CatAllIn {
		t.Errorf("no mismatch: %+v", h)
	}
}

// TestMismatchTie: two members, two different calls. Their own earlier
// calls on the group tell which changed (rank 1 called broadcast where it
// always called all_reduce, like rank 0); when they cannot (both changed,
// or no history), both are named, and that is said.
func TestMismatchTie(t *testing.T) {
	in := rounds(2, 4, func(r int, row *evidence.CommRow) {
		if r == 1 {
			row.Op = "broadcast"
		}
	})
	h := Diagnose(in).Hypotheses[0]
	if h.Category != CatMismatch || h.Culprits != "1" || h.Collateral != "0" || h.Confidence != High || !strings.Contains(allText(h), "differs from its own earlier calls") {
		t.Fatalf("history: %+v", h)
	}
	// A size change on rank 0, a dtype change on rank 1: both changed.
	in = rounds(2, 4, func(r int, row *evidence.CommRow) {
		if r == 0 {
			row.Shape, row.Bytes = "(3,)", 12
		} else {
			row.Dtype = "torch.float64"
		}
	})
	h = Diagnose(in).Hypotheses[0]
	if h.Category != CatMismatch || h.Culprits != "0-1" || h.Confidence != Medium || !strings.Contains(allText(h), "cannot be told") {
		t.Fatalf("both changed: %+v", h)
	}
	in = rounds(2, 1, func(r int, row *evidence.CommRow) {
		if r == 1 {
			row.Op = "broadcast"
		}
	})
	if h := Diagnose(in).Hypotheses[0]; h.Category == CatMismatch && h.Culprits != "0-1" {
		t.Fatalf("no history: %+v", h)
	}
}

// TestMismatchEarlierAndLeftOut: a mismatch that completed, earlier than
// the hang, is a low hypothesis of its own; groups whose group_seq cannot
// be compared (point-to-point calls on them, a group_seq repeated within
// a rank: two groups over the same ranks) are left out.
func TestMismatchEarlierAndLeftOut(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	for i := range in.Comm {
		r := &in.Comm[i]
		r.Bytes, r.Dtype = 8, "torch.float32"
		if r.Rank == 6 && r.GroupSeq == 2 && r.Ranks == "[0, 1, 2, 3, 4, 5, 6, 7]" {
			r.Bytes, r.Dtype = 99, "torch.int64"
		}
	}
	rep := Diagnose(in)
	if rep.Hypotheses[0].Category != CatCPUStall {
		t.Fatalf("first: %+v", rep.Hypotheses[0])
	}
	h := hypothesisFor(rep, CatMismatch, "6")
	if h == nil || h.Confidence != Low || !strings.Contains(allText(*h), "collective #2 (rings' count) of group 0-7") || !strings.Contains(allText(*h), "returned on every member") {
		t.Fatalf("%+v", rep.Hypotheses)
	}
	p2p := append([]evidence.CommRow(nil), in.Comm...)
	p2p = append(p2p, evidence.CommRow{Rank: 0, Op: "send", Ranks: "[0, 1, 2, 3, 4, 5, 6, 7]", GroupSeq: 40, DurationMS: 1})
	if ms := FindMismatches(p2p, 8); len(ms) != 0 {
		t.Errorf("group with a send counted on it: %+v", ms)
	}
	// A send with its peer is counted apart: the group stays comparable.
	p2p[len(p2p)-1].Peer = 5
	if ms := FindMismatches(p2p, 8); len(ms) != 1 {
		t.Errorf("group with a send to a peer: %+v", ms)
	}
	dup := append([]evidence.CommRow(nil), in.Comm...)
	dup = append(dup, evidence.CommRow{Rank: 6, Op: "all_reduce", Ranks: "[0, 1, 2, 3, 4, 5, 6, 7]", GroupSeq: 3, DurationMS: 1})
	if ms := FindMismatches(dup, 8); len(ms) != 0 {
		t.Errorf("group_seq repeated within a rank: %+v", ms)
	}
	// Unknown fields are not compared: a row without dtype or size.
	unk := rounds(3, 3, func(r int, row *evidence.CommRow) {
		if r == 1 {
			row.Dtype, row.Shape, row.Bytes = "", "", 0
		}
	})
	if ms := FindMismatches(unk.Comm, 3); len(ms) != 0 {
		t.Errorf("unknown fields: %+v", ms)
	}
}

// TestDeathOrder: two ranks dead, their peers waiting: one story, the
// first to die the culprit; without times, the order is said unknown.
func TestDeathOrder(t *testing.T) {
	in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
	in.Ranks[5].Alive, in.Ranks[5].Raised, in.Ranks[5].EndedNS = false, true, 1_700_000_000_000_000_000
	in.Ranks[5].Ending = "exited with code 1 after RuntimeError: CUDA error at train.py:42 (step)"
	in.Ranks[1].Alive, in.Ranks[1].Raised, in.Ranks[1].EndedNS = false, true, 1_700_000_000_400_000_000
	in.Ranks[1].Ending = "exited with code 1 after RuntimeError: Connection closed by peer"
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Category != CatDeadRank || h.Culprits != "5" || h.Confidence != High || h.Collateral != "0-4,6-7" ||
		!strings.Contains(allText(h), "rank 5 died first: exited with code 1 after RuntimeError: CUDA error") ||
		!strings.Contains(allText(h), "then rank 1 (400ms later)") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	if n := len(rep.Hypotheses); n != 1 || strings.Count(allText(h), "wait for it in collectives") != 1 {
		t.Errorf("%d hypotheses: %+v", n, rep.Hypotheses)
	}
	// Rank 5 killed by a signal (no record); ranks 1 and 4 died of the
	// broken connection it left: rank 5 is the culprit, not the first to
	// record a death.
	k := scenario(everyoneBut(5, 4, "none", "pair"), 200)
	k.Ranks[5].Alive = false
	for _, r := range []int{4, 1} {
		k.Ranks[r].Alive, k.Ranks[r].Raised, k.Ranks[r].EndedNS = false, true, 1_700_000_000_000_000_000+int64(r)*1e6
		k.Ranks[r].Ending = "exited with code 1 after RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500"
	}
	h = Diagnose(k).Hypotheses[0]
	if h.Category != CatDeadRank || h.Culprits != "5" || h.Confidence != Medium || !strings.Contains(allText(h), "killed by a signal") {
		t.Fatalf("killed by a signal: %+v", h)
	}
	in.Ranks[5].EndedNS, in.Ranks[1].EndedNS = 0, 0
	h = Diagnose(in).Hypotheses[0]
	if h.Category != CatDeadRank || h.Confidence != Low || !strings.Contains(allText(h), "order of these deaths is not known") {
		t.Fatalf("%+v", h)
	}
}

// TestMismatchRingsAndFlightRecorder: the rings and the Flight Recorder
// both show rank 7's tensor smaller: one hypothesis, with both sources'
// lines, high.
func TestMismatchRingsAndFlightRecorder(t *testing.T) {
	in := allInside()
	for i := range in.Comm {
		r := &in.Comm[i]
		r.Dtype, r.Bytes = "torch.float32", 4096
		if r.Rank == 7 && r.GroupSeq == 6 {
			r.Bytes = 2048
		}
	}
	rings := Diagnose(in).Hypotheses[0]
	if rings.Category != CatMismatch || rings.Culprits != "7" || rings.Confidence != High {
		t.Fatalf("rings alone: %+v", rings)
	}
	in.FR, in.FRRanks = synthFR(t, frsynth.Fault{Kind: "size", Rank: 7, Seq: 60}), []int{0, 1, 2, 3, 4, 5, 6, 7}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	text := allText(h)
	if len(rep.Hypotheses) != 1 || h.Category != CatMismatch || h.Culprits != "7" || h.Confidence != High ||
		!strings.Contains(text, "rank 7 called all_reduce (torch.float32, 2048 bytes)") || h.Evidence[0].Source != "flight_recorder" {
		t.Fatalf("%+v", rep.Hypotheses)
	}
}

// TestMismatchThatKilled: the backend broke on the mismatched call
// instead of hanging: its member died first, inside it. The mismatch is
// the cause and comes first; the deaths follow. Torch's own mismatch
// check, in the exception, says so without the rings.
func TestMismatchThatKilled(t *testing.T) {
	in := rounds(4, 5, func(r int, row *evidence.CommRow) {
		if r == 2 {
			row.Shape, row.Bytes = "(4,)", 16
		}
	})
	die := func(r int, at int64, msg string) {
		f := in.Ranks[r]
		f.Alive, f.Raised, f.EndedNS = false, true, at
		f.Ending = "exited with code 1 after RuntimeError: " + msg
		f.Record = &procfacts.Ending{Exception: &procfacts.ExitRecord{Kind: "exception", TimeNS: at, Type: "RuntimeError", Message: msg,
			Thread: &procfacts.ExitThread{IsMain: true}, Frames: []procfacts.ExitFrame{
				{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 4181, Function: "all_reduce"},
				{File: "/job/train.py", Line: 77, Function: "dp_sync"}}}}
	}
	die(2, 1_700_000_001_000_000_000, "Read error: Connection reset by peer")
	die(0, 1_700_000_001_200_000_000, "Connection closed by peer")
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Category != CatMismatch || h.Culprits != "2" || h.Confidence != High || h.Where == nil || h.Where.Function != "dp_sync" ||
		!strings.Contains(allText(h), "rank 2 died first, inside this very call") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	// Both deaths are of a broken connection: as a story of its own, the
	// deaths are weak.
	if d := hypothesisFor(rep, CatDeadRank, "2"); d == nil || d.Confidence != Low {
		t.Errorf("the deaths: %+v", rep.Hypotheses)
	}
	// No mismatch in the rings (the culprit's last rows were lost), but
	// torch's check raised: the exception says it.
	in = rounds(4, 5, nil)
	die(1, 1_700_000_001_000_000_000, "Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=4, OpType=ALLREDUCE, TensorShape=[4])")
	h = Diagnose(in).Hypotheses[0]
	if h.Category != CatMismatch || h.Culprits != "1" || h.Confidence != Medium || !strings.Contains(allText(h), "torch's own mismatch check") {
		t.Fatalf("%+v", h)
	}
	// A death outside any mismatched call stays a dead rank.
	in = rounds(4, 5, nil)
	die(3, 1_700_000_001_000_000_000, "corrupt shard")
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatDeadRank || h.Culprits != "3" {
		t.Fatalf("%+v", h)
	}
}

// TestDeathsThatSayLittle: a rank the backend aborted inside a collective
// died of what a peer sent, not of its own cause; a rank whose main
// thread ended, kept alive by its threads until it was killed, is
// main_thread_dead, post-mortem too.
func TestDeathsThatSayLittle(t *testing.T) {
	aborted := &RankFacts{Crash: &evidence.Crash{What: "Aborted", Main: &stacks.Thread{IsMain: true, Frames: []stacks.Frame{
		{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 2050, Function: "all_reduce"},
		{File: "/job/train.py", Line: 77, Function: "dp_sync"}}}}}
	if k := deathKind(aborted); k != diedOfPeer {
		t.Errorf("aborted inside all_reduce: kind %d", k)
	}
	segv := &RankFacts{Crash: &evidence.Crash{What: "Segmentation fault", Main: &stacks.Thread{IsMain: true, Frames: []stacks.Frame{
		{File: "/job/train.py", Line: 12, Function: "decode_sample"}}}}}
	if k := deathKind(segv); k != diedOwnCause {
		t.Errorf("segfault in the job's code: kind %d", k)
	}
	in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
	in.Ranks[5].Alive, in.Ranks[5].EndedNS = false, 1_700_000_000_000_000_000
	in.Ranks[5].Record = &procfacts.Ending{MainThreadExit: &procfacts.ExitRecord{Kind: "main_thread_exit", TimeNS: 1_700_000_000_000_000_000}}
	in.Ranks[5].Ending = "its main thread died of ValueError: bad batch while 1 non-daemon thread(s) kept it alive"
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatMainThreadDead || h.Culprits != "5" {
		t.Errorf("main thread dead, then killed: %+v", h)
	}
}
