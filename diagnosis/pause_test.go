package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// pausedJob: 4 ranks that stepped every second until idle seconds ago,
// each main thread at frames in kernel state st.
func pausedJob(idle float64, st string, frames []stacks.Frame) Input {
	in := noClockJob(map[int][]stacks.Frame{0: frames, 1: frames, 2: frames, 3: frames},
		map[int]string{0: st, 1: st, 2: st, 3: st})
	for _, f := range in.Ranks {
		a := &evidence.RankActivity{}
		last := f.NowNS/1000 - int64(idle*1e6)
		for i := int64(9); i >= 0; i-- {
			a.Steps = append(a.Steps, last-i*1_000_000)
		}
		f.Activity = a
	}
	return in
}

var validateFrames = []stacks.Frame{{File: "/job/train.py", Line: 140, Function: "validate"}, {File: "/job/train.py", Line: 180, Function: "main"}}

// TestPauseIsNotAHang: issue 22, kind 8. Every rank busy in a 15 s
// validation pass, no collective pending: a likely pause, not "stalled"
// and no culprit; past the pause limit, a stall.
func TestPauseIsNotAHang(t *testing.T) {
	rep := Diagnose(pausedJob(15, "R", validateFrames))
	if rep.State != StatePaused || len(rep.Hypotheses) != 1 || rep.Hypotheses[0].Category != CatHealthy || rep.Hypotheses[0].Confidence != Medium ||
		!strings.Contains(rep.Summary, "likely a pause") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	if rep := Diagnose(pausedJob(200, "R", validateFrames)); rep.State != StateStalled {
		t.Errorf("past the limit: %s", rep.Summary)
	}
	// Busy threads hand the GIL back and forth: one caught asleep on a
	// futex in the model's forward is still busy; one in a queue's get is
	// waiting.
	in := pausedJob(15, "R", validateFrames)
	in.Ranks[1].Main.State, in.Ranks[1].Main.WChan = "S", "futex_wait_queue"
	if rep := Diagnose(in); rep.State != StatePaused {
		t.Errorf("GIL hand-off in forward: %s", rep.Summary)
	}
	in.Ranks[1].Main.Frames = append([]stacks.Frame{{File: "/usr/lib/python3.11/queue.py", Line: 180, Function: "get"}}, validateFrames...)
	if rep := Diagnose(in); rep.State == StatePaused {
		t.Errorf("a queue's get: %s", rep.Summary)
	}
	// One rank asleep (waiting for a peer, say): no pause.
	in = pausedJob(15, "R", validateFrames)
	in.Ranks[2].Main.State = "S"
	if rep := Diagnose(in); rep.State == StatePaused {
		t.Errorf("one rank asleep: %s", rep.Summary)
	}
	// All in a torch.distributed call: waiting, not a pause.
	if rep := Diagnose(pausedJob(15, "R", barrierFrames)); rep.State == StatePaused {
		t.Errorf("all in a barrier: %s", rep.Summary)
	}
	// A collective in flight in the rings: not a pause.
	in = pausedJob(15, "R", validateFrames)
	in.Comm = []evidence.CommRow{{Rank: 1, TimestampUS: in.Ranks[1].NowNS / 1000, Op: "all_reduce", Ranks: "[0, 1, 2, 3]", GroupSeq: 3, DurationMS: -1}}
	if rep := Diagnose(in); rep.State == StatePaused {
		t.Errorf("a collective pending: %s", rep.Summary)
	}
}
