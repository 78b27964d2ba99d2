package diagnosis

import (
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// noClockJob is a 4-rank job whose collectives nothing records: each
// rank's main thread is at the frames given, asleep in the kernel (S)
// unless state says otherwise; no step, no ring, no span.
func noClockJob(frames map[int][]stacks.Frame, state map[int]string) Input {
	in := Input{World: 4, Ranks: map[int]*RankFacts{}}
	for r := 0; r < 4; r++ {
		st := "S"
		if s, ok := state[r]; ok {
			st = s
		}
		in.Ranks[r] = &RankFacts{Rank: r, PID: 2000 + r, Alive: true, NowNS: 1_700_000_000 * int64(time.Second), LocalRank: r,
			Main: &stacks.Thread{IsMain: true, State: st, Frames: frames[r]}}
	}
	return in
}

var (
	barrierFrames = []stacks.Frame{
		{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 4811, Function: "barrier"},
		{File: "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", Line: 81, Function: "wrapper"},
		{File: "/job/train.py", Line: 88, Function: "sync_epoch"},
		{File: "/job/train.py", Line: 120, Function: "main"},
	}
	loaderFrames = []stacks.Frame{
		{File: "/job/data.py", Line: 41, Function: "read_shard"},
		{File: "/job/train.py", Line: 101, Function: "main"},
	}
	socketWaitFrames = []stacks.Frame{
		{File: "/job/comm.py", Line: 56, Function: "all_reduce"},
		{File: "/job/train.py", Line: 70, Function: "main"},
	}
)

// TestNoClockIsNeverHealthy: issue 22, kind 2. Nothing times the job, the
// stacks show rank 2 in its loader while the others wait in a barrier: the
// state is unknown (not healthy), and rank 2 is the likely culprit at low
// confidence, from the stacks, with its line.
func TestNoClockIsNeverHealthy(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: barrierFrames, 1: barrierFrames, 2: loaderFrames, 3: barrierFrames}, nil)
	rep := Diagnose(in)
	if rep.State != StateUnknown {
		t.Fatalf("state %q: %s", rep.State, rep.Summary)
	}
	h := rep.Hypotheses[0]
	if h.Category != CatCPUStall || h.Culprits != "2" || h.Collateral != "0-1,3" || h.Confidence != Low {
		t.Fatalf("%+v\n%s", h, rep.Summary)
	}
	if h.Where == nil || h.Where.Line != 41 {
		t.Errorf("where %+v", h.Where)
	}
	for _, e := range h.Evidence {
		if e.Source == "comm_rings" {
			t.Errorf("a rings line in a verdict the rings never gave: %+v", e)
		}
	}
	if !strings.Contains(strings.Join(rep.DataQuality, "\n"), "read from the stacks") || !strings.Contains(rep.Summary, "unknown") {
		t.Errorf("%s\n%v", rep.Summary, rep.DataQuality)
	}
	if strings.Contains(rep.Summary, "No hang") {
		t.Errorf("a stuck job called healthy: %s", rep.Summary)
	}
}

// TestNoClockPlainPythonBarrier: no torch frame at all (a job's own socket
// collective): three ranks asleep at one line, one elsewhere.
func TestNoClockPlainPythonBarrier(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: socketWaitFrames, 1: socketWaitFrames, 2: loaderFrames, 3: socketWaitFrames}, nil)
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if rep.State != StateUnknown || h.Category != CatCPUStall || h.Culprits != "2" || h.Confidence != Low {
		t.Fatalf("%+v\n%s", h, rep.Summary)
	}
	// The same, with the three running on the CPU (R): not a wait, so no
	// culprit is read from where they are.
	in = noClockJob(map[int][]stacks.Frame{0: socketWaitFrames, 1: socketWaitFrames, 2: loaderFrames, 3: socketWaitFrames},
		map[int]string{0: "R", 1: "R", 3: "R"})
	rep = Diagnose(in)
	if rep.State != StateUnknown || len(rep.Hypotheses) != 1 || rep.Hypotheses[0].Culprits != "" || rep.Hypotheses[0].Confidence != Low {
		t.Fatalf("%+v\n%s", rep.Hypotheses, rep.Summary)
	}
}

// TestNoClockNoStructure: every rank somewhere else: unknown, no culprit,
// low confidence, and still not healthy.
func TestNoClockNoStructure(t *testing.T) {
	f := func(line int) []stacks.Frame {
		return []stacks.Frame{{File: "/job/train.py", Line: line, Function: "step"}}
	}
	rep := Diagnose(noClockJob(map[int][]stacks.Frame{0: f(1), 1: f(2), 2: f(3), 3: f(4)}, nil))
	h := rep.Hypotheses[0]
	if rep.State != StateUnknown || h.Category == CatHealthy || h.Culprits != "" || h.Confidence != Low {
		t.Fatalf("%+v\n%s", h, rep.Summary)
	}
	if !strings.Contains(h.Evidence[0].Text, "unknown, not healthy") {
		t.Errorf("%+v", h.Evidence)
	}
}

// TestStalledStacksOnlyIsMedium: a clock says the job stalled, but the
// rings hold no collective in flight (DDP's reducer issues its all_reduce
// from C++): the stacks find the culprit, at medium confidence at most.
func TestStalledStacksOnlyIsMedium(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: barrierFrames, 1: barrierFrames, 2: loaderFrames, 3: barrierFrames}, nil)
	for _, f := range in.Ranks {
		// Steps every second until 200 s ago.
		a := &evidence.RankActivity{}
		last := f.NowNS/1000 - 200_000_000
		for i := int64(9); i >= 0; i-- {
			a.Steps = append(a.Steps, last-i*1_000_000)
		}
		f.Activity = a
	}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if rep.State != StateStalled || h.Category != CatCPUStall || h.Culprits != "2" || h.Confidence != Medium {
		t.Fatalf("state %s %+v\n%s", rep.State, h, rep.Summary)
	}
}

// stuckAt gives rank r of in a main thread at frames, asleep.
func stuckAt(in Input, r int, frames ...stacks.Frame) {
	in.Ranks[r].Main = &stacks.Thread{IsMain: true, State: "S", Frames: frames}
}

var (
	allReduceFrames = []stacks.Frame{
		{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 4181, Function: "all_reduce"},
		{File: "/job/train.py", Line: 145, Function: "log_metrics"}}
	backwardFrames = []stacks.Frame{
		{File: "/venv/lib/python3.11/site-packages/torch/autograd/graph.py", Line: 1113, Function: "_engine_run_backward"},
		{File: "/job/train.py", Line: 170, Function: "train_epoch"}}
	flockFrames = []stacks.Frame{{File: "/job/train.py", Line: 150, Function: "append_manifest"}}
)

// TestUnflushedRowTakenFromTheStack: ranks 0 and 3 are inside the
// metrics all_reduce #5 by their stacks, but their rings end at #4 (the
// row was not flushed before they were asked, or died); rank 2's ring has
// it. Rank 1 skipped it and waits in backward (DDP's gradient all_reduce):
// it is the one culprit, missing from the collective its peers wait in,
// at medium confidence (a backward that never ends looks the same).
func TestUnflushedRowTakenFromTheStack(t *testing.T) {
	in := onlyIn(5, 2)
	stuckAt(in, 0, allReduceFrames...)
	stuckAt(in, 3, allReduceFrames...)
	stuckAt(in, 1, backwardFrames...)
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Culprits != "1" || h.Collateral != "0,2-3" || h.Category != CatMissing || h.Confidence != Medium || !strings.Contains(allText(h), "DDP's gradient all_reduce") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	if !strings.Contains(strings.Join(rep.DataQuality, "\n"), "ring row was not written") {
		t.Errorf("%q", rep.DataQuality)
	}
}

// TestSameWaitIsOneLowHypothesis: rank 0 waits in a barrier while ranks
// 1-3 are all blocked at one flock (the lock rank 0 holds across the
// barrier): not three confident culprits, one low hypothesis that says
// they wait for one thing.
func TestSameWaitIsOneLowHypothesis(t *testing.T) {
	in := onlyIn(5, 0)
	for r := 1; r < 4; r++ {
		stuckAt(in, r, flockFrames...)
	}
	rep := Diagnose(in)
	for _, h := range rep.Hypotheses {
		if h.Confidence == High {
			t.Errorf("a confident culprit among ranks that wait at one place: %+v", h)
		}
	}
	h := rep.Hypotheses[0]
	if h.Culprits != "1-3" || h.Confidence != Low || !strings.Contains(allText(h), "blocked in the same call") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
}

// TestFileLockAcrossACollective: the same job with /proc/locks read: ranks
// 1-3 wait in flock for the lock rank 0 holds while rank 0 waits in the
// barrier for them. Rank 0 is the culprit of a deadlock across processes.
func TestFileLockAcrossACollective(t *testing.T) {
	in := onlyIn(5, 0)
	for r := 0; r < 4; r++ {
		in.Ranks[r].PID = 3000 + r
	}
	stuckAt(in, 0, append([]stacks.Frame{{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 4811, Function: "barrier"}}, flockFrames...)...)
	for r := 1; r < 4; r++ {
		stuckAt(in, r, flockFrames...)
		in.Ranks[r].LockWait = &procfacts.LockWait{Waiter: 3000 + r, Holder: 3000, Kind: "FLOCK", File: "fe:00:42"}
	}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Category != CatDeadlock || h.Culprits != "0" || h.Collateral != "1-3" || h.Where == nil || h.Where.Function != "append_manifest" ||
		!strings.Contains(allText(h), "rank 0 (pid 3000) holds") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	// With the file's path read from the processes' descriptors, the
	// lock is named by it, quoted as the job's text, not by its inode.
	for r := 1; r < 4; r++ {
		in.Ranks[r].LockWait.Path = "/ckpt/run-7/MANIFEST"
	}
	if h := Diagnose(in).Hypotheses[0]; !strings.Contains(allText(h), "file ⟦/ckpt/run-7/MANIFEST⟧") || strings.Contains(allText(h), "fe:00:42") {
		t.Fatalf("the lock's path: %+v", h.Evidence)
	}
	// The holder is no rank of the job: the waiters stay, and it is named.
	for r := 1; r < 4; r++ {
		in.Ranks[r].LockWait.Holder = 4242
	}
	h = Diagnose(in).Hypotheses[0]
	if h.Culprits != "1-3" || h.Confidence != Low || !strings.Contains(allText(h), "pid 4242 holds, no rank of this job") {
		t.Fatalf("%+v", h)
	}
}

// TestMovingWithoutRecordedCollectives: a DDP job that steps (a clock),
// whose collectives no ring records: never a confident all-clear, and a
// stack sample with three ranks asleep in backward and one in its loader
// adds a low straggler hint.
func TestMovingWithoutRecordedCollectives(t *testing.T) {
	in := pausedJob(0.05, "S", backwardFrames)
	in.Ranks[1].Main.Frames = loaderFrames
	rep := Diagnose(in)
	if rep.State != StateHealthy || len(rep.Hypotheses) != 2 || rep.Hypotheses[0].Confidence != Medium {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	if h := rep.Hypotheses[1]; h.Category != CatStraggler || h.Culprits != "1" || h.Confidence != Low {
		t.Errorf("%+v", h)
	}
	// DDP's set-up broadcast is recorded, long before the steps: still no
	// collective in the recent steps.
	for r, f := range in.Ranks {
		f.Activity.LastComm = f.Activity.Steps[0] - 60_000_000
		in.Comm = append(in.Comm, evidence.CommRow{Rank: r, TimestampUS: f.Activity.LastComm, Op: "broadcast", Ranks: "[0, 1, 2, 3]", GroupSeq: 1, DurationMS: 1})
	}
	if rep := Diagnose(in); rep.Hypotheses[0].Confidence != Medium || len(rep.Hypotheses) != 2 {
		t.Errorf("an old set-up collective: %+v", rep.Hypotheses)
	}
}

// onlyIn is rounds(4, n) where only rank r's ring records collective #n
// (the others' rows of it not written, or never issued).
func onlyIn(n, r int) Input {
	in := rounds(4, n, nil)
	var comm []evidence.CommRow
	for _, row := range in.Comm {
		if row.GroupSeq != int64(n) || row.Rank == r {
			comm = append(comm, row)
		}
	}
	in.Comm = comm
	return in
}

// TestStragglerOverSamples: with three more samples, the rank elsewhere
// in every one is the straggler (slow, medium); when a different rank is
// elsewhere each time, nobody is named and the job stays healthy.
func TestStragglerOverSamples(t *testing.T) {
	sample := func(elsewhere int) map[int]*stacks.Thread {
		m := map[int]*stacks.Thread{}
		for r := 0; r < 4; r++ {
			fr := backwardFrames
			if r == elsewhere {
				fr = loaderFrames
			}
			m[r] = &stacks.Thread{IsMain: true, State: "S", Frames: fr}
		}
		return m
	}
	in := pausedJob(0.05, "S", backwardFrames)
	in.Ranks[1].Main.Frames = loaderFrames
	for _, e := range []int{1, 1, 1} {
		for r, th := range sample(e) {
			in.Ranks[r].Samples = append(in.Ranks[r].Samples, th)
		}
	}
	rep := Diagnose(in)
	if h := rep.Hypotheses[0]; rep.State != StateSlow || h.Category != CatStraggler || h.Culprits != "1" || h.Confidence != Medium || len(rep.Hypotheses) != 1 {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
	for r := range in.Ranks {
		in.Ranks[r].Samples = nil
	}
	for _, e := range []int{2, 0, 3} {
		for r, th := range sample(e) {
			in.Ranks[r].Samples = append(in.Ranks[r].Samples, th)
		}
	}
	rep = Diagnose(in)
	if rep.State != StateHealthy || len(rep.Hypotheses) != 1 || rep.Hypotheses[0].Confidence != Medium ||
		!strings.Contains(allText(rep.Hypotheses[0]), "none is excluded") {
		t.Fatalf("%s\n%+v", rep.Summary, rep.Hypotheses)
	}
}

// TestFlightRecorderIsAClock: the same job with no ring and no step, but a
// Flight Recorder whose entries time its collectives (DDP's, from C++):
// entries every 100 ms until 40 s ago say it stalled (rank 2, last entered
// earlier, is where the stacks say); entries until a moment ago say it
// moves.
func TestFlightRecorderIsAClock(t *testing.T) {
	now := int64(1_700_000_000) * int64(time.Second)
	created := func(endAgo time.Duration) []int64 {
		var ts []int64
		for i := 40; i >= 1; i-- {
			ts = append(ts, now-int64(endAgo)-int64(i)*int64(100*time.Millisecond))
		}
		return ts
	}
	in := noClockJob(map[int][]stacks.Frame{0: barrierFrames, 1: barrierFrames, 2: loaderFrames, 3: barrierFrames}, nil)
	in.FR = &fr.Report{Created: map[int][]int64{0: created(40 * time.Second), 1: created(40 * time.Second), 2: created(41 * time.Second), 3: created(40 * time.Second)}}
	rep := Diagnose(in)
	if rep.State != StateStalled || rep.Hypotheses[0].Culprits != "2" || rep.Hypotheses[0].Category != CatCPUStall {
		t.Fatalf("%s", rep.Text())
	}
	in = noClockJob(map[int][]stacks.Frame{0: loaderFrames, 1: loaderFrames, 2: loaderFrames, 3: loaderFrames}, map[int]string{0: "R", 1: "R", 2: "R", 3: "R"})
	in.FR = &fr.Report{Created: map[int][]int64{0: created(0), 1: created(0), 2: created(0), 3: created(0)}}
	if rep := Diagnose(in); rep.State != StateHealthy && rep.State != StateProgressing {
		t.Fatalf("%s", rep.Text())
	}
}
