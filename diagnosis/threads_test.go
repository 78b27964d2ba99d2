package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// withThreads gives rank r of in the threads (and their capture's facts)
// that rank from of a captured bundle had.
func withThreads(t *testing.T, in Input, r int, capture string, from int) {
	t.Helper()
	e := loadCapture(t, capture).Ranks[from]
	if e == nil {
		t.Fatalf("%s has no rank %d", capture, from)
	}
	f := in.Ranks[r]
	f.Main, f.Threads, f.StackSource, f.StackErr, f.AgentErr, f.OSThreads, f.Record, f.EndedNS =
		e.Main, evidence.WithLocks(e.Threads, e.Locks), e.StackSource, e.StackErr, e.AgentErr, e.OSThreads, e.Record, e.EndedNS
}

func hypothesisFor(rep Report, cat, culprits string) *Hypothesis {
	for i := range rep.Hypotheses {
		if h := &rep.Hypotheses[i]; h.Category == cat && h.Culprits == culprits {
			return h
		}
	}
	return nil
}

// TestThreadsRefineCPUSink: the 8-rank job where rank 3 never entered
// its collectives (a cpu-side sink), with the threads each real capture's
// culprit had: the sink takes the threads' category; high confidence only
// where the threads' reading is sure.
func TestThreadsRefineCPUSink(t *testing.T) {
	for _, c := range []struct {
		capture, category, confidence, function string
	}{
		{"deadlock", CatDeadlock, High, "update_stats"},
		{"deadlock_rlock", CatDeadlock, High, "update_stats"},
		{"gil_held", CatGILHeld, High, "native_wait"},
		{"main_thread_dead", CatMainThreadDead, High, "load_batch"},
	} {
		in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
		withThreads(t, in, 3, c.capture, 1)
		rep := Diagnose(in)
		h := rep.Hypotheses[0]
		if h.Category != c.category || h.Culprits != "3" || h.Collateral != "0-2,4-7" || h.Confidence != c.confidence || h.Where == nil || h.Where.Function != c.function {
			t.Errorf("%s: %s\n%+v", c.capture, rep.Summary, h)
		}
		if !strings.Contains(allText(h), "wait for it in collectives") {
			t.Errorf("%s: the rings' part is gone: %s", c.capture, allText(h))
		}
	}
}

// TestThreadsWeakerReadings: the same findings on less evidence are said
// with less confidence: locks whose holders are not known (taken with
// acquire(), or an agent that does not say), a dead main thread seen only
// in the stacks (no ending record), a GIL holder without /proc's word on
// who runs.
func TestThreadsWeakerReadings(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "deadlock", 1)
	for i := range in.Ranks[3].Threads {
		in.Ranks[3].Threads[i].LocksHeld = nil
	}
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatDeadlock || h.Confidence != Medium ||
		!strings.Contains(allText(h), "deadlock likely: 2 threads of rank 3 are blocked acquiring 2 different held locks") || !strings.Contains(allText(h), "holder is not known") {
		t.Errorf("holders unknown: %+v", h)
	}
	in = scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "main_thread_dead", 1)
	in.Ranks[3].Record = nil
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatMainThreadDead || h.Confidence != Medium || !strings.Contains(allText(h), "threading._shutdown") {
		t.Errorf("main thread dead, stacks only: %+v", h)
	}
	in = scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "gil_held", 1)
	in.Ranks[3].OSThreads = nil
	for i := range in.Ranks[3].Threads {
		in.Ranks[3].Threads[i].State, in.Ranks[3].Threads[i].WChan = "", ""
	}
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatGILHeld || h.Confidence != Medium || !strings.Contains(allText(h), "no /proc reading") {
		t.Errorf("GIL held, no /proc: %+v", h)
	}
	// No faulthandler dump: /proc's threads alone.
	in = scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "gil_held", 1)
	f := in.Ranks[3]
	f.StackSource, f.Threads, f.OSThreads, f.Main = stacks.SourceProc, f.OSThreads, nil, nil
	f.StackErr += "; faulthandler: no dump appeared in .stacks.txt within 2s"
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatGILHeld || h.Confidence != Medium || h.Where != nil ||
		!strings.Contains(allText(h), "no Python frames could be read") || !strings.Contains(allText(h), "hrtimer_nanosleep") {
		t.Errorf("GIL held, /proc only: %+v", h)
	}
}

// TestThreadsTimeoutAgainstSleepingProc: issue 22, kind 6. The agent
// missed its deadline on a loaded node while /proc shows the main thread
// asleep in a socket wait and another thread runnable (the agent's, not
// waiting for any GIL): the two sources disagree, so no high confidence,
// and the disagreement is said.
func TestThreadsTimeoutAgainstSleepingProc(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "gil_held", 1)
	f := in.Ranks[3]
	for i := range f.OSThreads {
		if f.OSThreads[i].IsMain {
			f.OSThreads[i].State, f.OSThreads[i].WChan = "S", "sk_wait_data"
		} else {
			f.OSThreads[i].State, f.OSThreads[i].WChan = "R", ""
			break
		}
	}
	h := Diagnose(in).Hypotheses[0]
	if h.Culprits != "3" || h.Confidence == High || !strings.Contains(allText(h), "a slow agent on a loaded node explains the timeout as well") {
		t.Errorf("%+v", h)
	}
}

// TestThreadsContradiction: threads blocked on locks in a rank the rings
// show inside a collective: the finding is kept, low, and the
// disagreement said; the rings' culprit stays first.
func TestThreadsContradiction(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 5, "deadlock", 1)
	rep := Diagnose(in)
	if h := rep.Hypotheses[0]; h.Category != CatCPUStall || h.Culprits != "3" {
		t.Fatalf("first: %+v", h)
	}
	h := hypothesisFor(rep, CatDeadlock, "5")
	if h == nil || h.Confidence != Low || !strings.Contains(allText(*h), "but the rings show rank 5 inside all_reduce #6") {
		t.Fatalf("%+v", rep.Hypotheses)
	}
	// The other way round: the rings say rank 3 is in no collective, its
	// GIL-holding main thread's stack is inside torch.distributed.
	in = scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "gil_held", 1)
	for i := range in.Ranks[3].Threads {
		if th := &in.Ranks[3].Threads[i]; th.IsMain {
			th.Frames = append([]stacks.Frame{{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 2050, Function: "all_reduce"}}, th.Frames...)
		}
	}
	g := Diagnose(in).Hypotheses[0]
	if g.Category != CatGILHeld || g.Confidence != Low || !strings.Contains(allText(g), "inside torch.distributed while the rings say it is in no collective") {
		t.Errorf("%+v", g)
	}
}

// TestThreadsGarbage: captures that say nothing usable give no thread
// hypothesis, and never a panic: no threads at all (the agent's
// connection closed), an agent that refused rather than timed out (not a
// GIL reading), lock waits that are not waits (the lock is free, or
// /proc shows the thread running).
func TestThreadsGarbage(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	f := in.Ranks[3]
	f.StackSource, f.StackErr, f.AgentErr = stacks.SourceProc, "pid 1003: the connection closed before a reply", "dead"
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatCPUStall || h.Confidence != Medium {
		t.Errorf("no threads: %+v", h)
	}
	withThreads(t, in, 3, "gil_held", 1)
	f.AgentErr = "refused"
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatCPUStall {
		t.Errorf("refused is not the GIL: %+v", h)
	}
	withThreads(t, in, 3, "deadlock", 1)
	for i := range f.Threads {
		if w := f.Threads[i].LockWait; w != nil {
			cp := *w
			cp.Locked = false
			f.Threads[i].LockWait = &cp
		}
	}
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatCPUStall {
		t.Errorf("free locks: %+v", h)
	}
	withThreads(t, in, 3, "deadlock", 1)
	for i := range f.Threads {
		f.Threads[i].State, f.Threads[i].WChan = "R", ""
	}
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatCPUStall {
		t.Errorf("running threads: %+v", h)
	}
	// A rank whose agent answered with threads that have no frames at all.
	f.Threads, f.Main, f.StackSource, f.AgentErr = []stacks.Thread{{ID: 1, IsMain: true}}, nil, stacks.SourceAgent, ""
	if h := Diagnose(in).Hypotheses[0]; h.Category != CatCPUStall || h.Culprits != "3" {
		t.Errorf("frameless threads: %+v", h)
	}
}

// TestThreadsNeverOnProgress: the same deadlocked threads in a job that
// still moves give no hypothesis but healthy.
func TestThreadsNeverOnProgress(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "default", "pair"), 0.05)
	withThreads(t, in, 3, "deadlock_rlock", 1)
	rep := Diagnose(in)
	if len(rep.Hypotheses) != 1 || rep.Hypotheses[0].Category != CatHealthy {
		t.Fatalf("%+v", rep)
	}
}

// TestThreadsWithoutRings: no collectives recorded at all (a job that
// records none): the threads are the only evidence, said so, at a
// confidence one step lower than with the rings.
func TestThreadsWithoutRings(t *testing.T) {
	b := loadCapture(t, "deadlock_rlock")
	b.Comm = nil
	for _, e := range b.Ranks {
		e.Activity = &evidence.RankActivity{Rank: e.Rank, LastComm: e.NowNS/1000 - 300_000_000}
	}
	rep := Diagnose(FromBundle(b, StateOptions{}))
	h := hypothesisFor(rep, CatDeadlock, "1")
	if rep.State != StateStalled || h == nil || h.Confidence != Medium || rep.Hypotheses[0].Category != CatDeadlock ||
		!strings.Contains(allText(*h), "the stacks alone say this") {
		t.Fatalf("%s %+v", rep.State, rep.Hypotheses)
	}
}

// TestThreadsMainAbsent: the agent's threads without a main thread (it
// ended; its non-daemon thread lives on), no ending record: main thread
// dead, from the stacks alone.
func TestThreadsMainAbsent(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	withThreads(t, in, 3, "main_thread_dead", 1)
	f := in.Ranks[3]
	f.Record, f.Main = nil, nil
	var kept []stacks.Thread
	for _, th := range f.Threads {
		if !th.IsMain {
			kept = append(kept, th)
		}
	}
	f.Threads = kept
	h := Diagnose(in).Hypotheses[0]
	if h.Category != CatMainThreadDead || h.Culprits != "3" || h.Confidence != Medium || h.Where == nil || h.Where.Function != "heartbeat" ||
		!strings.Contains(allText(h), "no main thread") {
		t.Fatalf("%+v", h)
	}
}

// TestThreadsAlikeGrouped: every rank's main thread gone the same way,
// nobody waiting in a collective: one hypothesis naming them all.
func TestThreadsAlikeGrouped(t *testing.T) {
	b := loadCapture(t, "main_thread_dead")
	b.Comm = nil
	e1 := b.Ranks[1]
	for r := 0; r < 4; r++ {
		cp := *e1
		cp.Rank = r
		cp.Activity = &evidence.RankActivity{Rank: r, LastComm: e1.NowNS/1000 - 300_000_000}
		b.Ranks[r] = &cp
	}
	rep := Diagnose(FromBundle(b, StateOptions{}))
	h := rep.Hypotheses[0]
	if len(rep.Hypotheses) != 1 || h.Category != CatMainThreadDead || h.Culprits != "0-3" || h.Confidence != Medium ||
		!strings.Contains(allText(h), "4 ranks show the same (ranks 0-3)") {
		t.Fatalf("%+v", rep.Hypotheses)
	}
}
