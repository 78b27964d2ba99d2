package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// TestPostMortemTimeoutVictims: issue 22, kind 7. A job left to die on a
// gloo timeout: rank 3 waited for a lock file and never issued all_reduce
// #5; ranks 0-2 were in it, and each raised when it timed out (rank 0
// first). Then torchrun killed rank 3. The culprit is rank 3, not rank 0.
func TestPostMortemTimeoutVictims(t *testing.T) {
	in := rounds(4, 5, func(r int, row *evidence.CommRow) {
		row.DurationMS = 40000 // the wrapper closed the row as the call raised
	})
	// Rank 3 never issued #5.
	var comm []evidence.CommRow
	for _, row := range in.Comm {
		if !(row.Rank == 3 && row.GroupSeq == 5) {
			comm = append(comm, row)
		}
	}
	in.Comm = comm
	const t0 = int64(1_700_000_041_000_000_000)
	for r := 0; r < 3; r++ {
		f := in.Ranks[r]
		at := t0 + int64(r)*50_000_000
		msg := "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 40000ms for recv operation to complete"
		f.Alive, f.Raised, f.EndedNS = false, true, at
		f.Ending = "exited with code 1 after RuntimeError: " + msg
		f.Record = &procfacts.Ending{Exception: &procfacts.ExitRecord{Kind: "exception", TimeNS: at, Type: "RuntimeError", Message: msg,
			Thread: &procfacts.ExitThread{IsMain: true}, Frames: []procfacts.ExitFrame{
				{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 2806, Function: "all_reduce"},
				{File: "/job/train.py", Line: 90, Function: "train_step"}}}}
	}
	f3 := in.Ranks[3]
	f3.Alive, f3.EndedNS = false, t0+2_000_000_000
	f3.Ending = "killed by SIGTERM"
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Culprits != "3" || h.Category != CatCPUStall || strings.Contains(h.Collateral, "3") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	for _, o := range rep.Hypotheses {
		if o.Culprits == "0" && o.Confidence != Low {
			t.Errorf("the first victim blamed: %+v", o)
		}
	}
}

// TestLauncherStopIsNoCause: rank 2 raised under torchrun; torchrun then
// stopped the others with SIGTERM (rank 0 left no time, ranks 1 and 3 died
// of the broken connection first). Rank 2 is the culprit, and the order
// is known: the stopped ranks are consequences.
func TestLauncherStopIsNoCause(t *testing.T) {
	in := rounds(4, 5, nil)
	const t0 = int64(1_700_000_041_000_000_000)
	f2 := in.Ranks[2]
	f2.Alive, f2.Raised, f2.EndedNS = false, true, t0
	f2.Ending = "exited with code 1 after ValueError: sample batch 12: token ids out of range"
	f2.Record = &procfacts.Ending{Exception: &procfacts.ExitRecord{Kind: "exception", TimeNS: t0, Type: "ValueError", Message: "sample batch 12: token ids out of range",
		Thread: &procfacts.ExitThread{IsMain: true}, Frames: []procfacts.ExitFrame{{File: "/job/train.py", Line: 106, Function: "check_batch"}}}}
	f0 := in.Ranks[0]
	f0.Alive, f0.Ending, f0.Record = false, "ended by SIGTERM (no exit record)", &procfacts.Ending{Signals: []string{"SIGTERM"}}
	for _, r := range []int{1, 3} {
		f := in.Ranks[r]
		at := t0 + 800_000_000
		msg := "[gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:24770"
		f.Alive, f.Raised, f.EndedNS = false, true, at
		f.Ending = "ended by SIGTERM after RuntimeError: " + msg
		f.Record = &procfacts.Ending{Signals: []string{"SIGTERM"}, Exception: &procfacts.ExitRecord{Kind: "exception", TimeNS: at, Type: "RuntimeError", Message: msg}}
	}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Culprits != "2" || h.Category != CatDeadRank || h.Confidence != High || h.Where == nil || h.Where.Function != "check_batch" {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
}
