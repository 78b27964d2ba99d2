package diagnosis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// scenario is the 8-rank job of the comm tests as Diagnose gets it: five
// rounds of a pair all_reduce then a default one, 0.5 s apart; round 6 as
// round6 says (for each rank: "pair", "default", "both" or "none"); read
// idle seconds after the last row, on one clock.
func scenario(round6 map[int]string, idle float64) Input {
	pair := func(r int) string { return fmt.Sprintf("[%d, %d]", r/2*2, r/2*2+1) }
	const all = "[0, 1, 2, 3, 4, 5, 6, 7]"
	in := Input{World: 8, Ranks: map[int]*RankFacts{}}
	var lastTS int64
	for r := 0; r < 8; r++ {
		ts := int64(1_700_000_000_000_000) // µs
		add := func(grp string, seq int64, dur float64) {
			ts += 250_000
			in.Comm = append(in.Comm, evidence.CommRow{Rank: r, TimestampUS: ts, Op: "all_reduce", Ranks: grp, GroupSeq: seq, DurationMS: dur})
		}
		for s := int64(1); s <= 5; s++ {
			add(pair(r), s, 1)
			add(all, s, 1)
		}
		switch round6[r] {
		case "pair":
			add(pair(r), 6, -1)
		case "default":
			add(all, 6, -1)
		case "both":
			add(pair(r), 6, 1)
			add(all, 6, -1)
		}
		lastTS = max(lastTS, ts)
		in.Ranks[r] = &RankFacts{Rank: r, PID: 1000 + r, Alive: true}
	}
	now := lastTS*1000 + int64(idle*float64(time.Second))
	for _, f := range in.Ranks {
		f.NowNS = now
		var a evidence.RankActivity
		for _, row := range in.Comm {
			if row.Rank == f.Rank {
				a.LastComm = max(a.LastComm, row.TimestampUS)
				if row.DurationMS >= 0 {
					a.LastCommDone = max(a.LastCommDone, row.TimestampUS+int64(row.DurationMS*1000))
				}
			}
		}
		f.Activity = &a
	}
	return in
}

func everyoneBut(culprit, partner int, c, p string) map[int]string {
	m := map[int]string{}
	for r := 0; r < 8; r++ {
		m[r] = "both"
	}
	m[culprit], m[partner] = c, p
	return m
}

func TestDiagnoseSkippedCollective(t *testing.T) {
	rep := Diagnose(scenario(everyoneBut(3, 2, "default", "pair"), 200))
	h := rep.Hypotheses[0]
	if rep.State != StateStalled || h.Category != CatMissing || h.Culprits != "3" || h.Collateral != "0-2,4-7" || h.Confidence != High {
		t.Fatalf("%+v\n%+v", rep, h)
	}
	if !strings.HasPrefix(rep.Summary, "rank 3 is the culprit (missing_from_collective, high confidence)") {
		t.Errorf("summary %q", rep.Summary)
	}
}

func TestDiagnoseCPUStallWhere(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "none", "pair"), 200)
	in.Ranks[3].Main = &stacks.Thread{IsMain: true, Frames: []stacks.Frame{
		{File: "/usr/lib/python3.11/time.py", Line: 1, Function: "sleep"},
		{File: "/job/train.py", Line: 63, Function: "fake_data_loader"},
		{File: "/job/train.py", Line: 80, Function: "main"}}}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Category != CatCPUStall || h.Culprits != "3" || h.Confidence != High || h.Where == nil || h.Where.Line != 63 {
		t.Fatalf("%+v", h)
	}
	if !strings.Contains(rep.Summary, "at ⟦train.py⟧:63 (⟦fake_data_loader⟧)") {
		t.Errorf("summary %q", rep.Summary)
	}
	// The stack says it is inside torch's collective: the rings and the
	// stack disagree, and the answer says so instead of being sure.
	// torchelastic's @record wraps the whole main function: an outer frame
	// in torch/distributed is not a collective.
	in.Ranks[3].Main.Frames = append(in.Ranks[3].Main.Frames, stacks.Frame{
		File: "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", Line: 355, Function: "wrapper"})
	if h := Diagnose(in).Hypotheses[0]; h.Confidence != High {
		t.Errorf("@record's wrapper taken for a collective: %+v", h)
	}
	in.Ranks[3].Main.Frames[0] = stacks.Frame{File: "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", Line: 2806, Function: "all_reduce"}
	if h := Diagnose(in).Hypotheses[0]; h.Confidence != Low || !strings.Contains(h.Evidence[len(h.Evidence)-1].Text, "disagree") {
		t.Errorf("contradiction: %+v", h)
	}
}

// TestDiagnoseNoFalseAlarm: the same picture read 50 ms after the last
// row is a job that moves: no hang hypothesis at all.
func TestDiagnoseNoFalseAlarm(t *testing.T) {
	rep := Diagnose(scenario(everyoneBut(3, 2, "default", "pair"), 0.05))
	if rep.State == StateStalled || len(rep.Hypotheses) != 1 || rep.Hypotheses[0].Category != CatHealthy {
		t.Fatalf("%+v", rep)
	}
}

// TestDiagnoseQuietJobIsNoConfidentAllClear: every rank silent for six of
// its half-second steps, still under the 5 s threshold. It is not yet a
// stall, but a hang starts exactly like this (a loaded machine's cpu_stall
// was called healthy with high confidence at this point): the all-clear is
// low confidence, says how long no rank moved, and when to call again.
func TestDiagnoseQuietJobIsNoConfidentAllClear(t *testing.T) {
	if h := Diagnose(scenario(everyoneBut(3, 2, "default", "pair"), 0.05)).Hypotheses[0]; h.Confidence != High {
		t.Errorf("just stepped: %+v", h)
	}
	rep := Diagnose(scenario(everyoneBut(3, 2, "default", "pair"), 3))
	h := rep.Hypotheses[0]
	if rep.State != StateHealthy || h.Category != CatHealthy || h.Confidence != Low {
		t.Fatalf("%+v", rep)
	}
	if !strings.HasPrefix(rep.Summary, "No hang yet: ") || !strings.Contains(rep.Summary, "no rank has made progress for 3s") ||
		!strings.Contains(rep.Summary, "past 5s it is a stall") || !strings.Contains(h.Confirm, "call again in 3s") {
		t.Errorf("summary %q, confirm %q", rep.Summary, h.Confirm)
	}
}

func TestDiagnoseDeadRank(t *testing.T) {
	in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
	in.Ranks[5].Alive = false
	in.Ranks[5].Ending = "exited with code 1 after ZeroDivisionError: division by zero at train.py:42 (load_batch)"
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if rep.State != StateDead || h.Category != CatDeadRank || h.Culprits != "5" || h.Confidence != High || !strings.Contains(h.Evidence[2].Text, "ZeroDivisionError") {
		t.Fatalf("%+v\n%+v", rep, h)
	}
}

// TestPostMortemFirstDeath: every rank is gone, but rank 5 died of its own
// exception (the others were killed later, hung): rank 5 is the dead
// rank; the others' rings show them waiting for it.
func TestPostMortemFirstDeath(t *testing.T) {
	in := scenario(everyoneBut(5, 4, "none", "pair"), 200)
	for _, f := range in.Ranks {
		f.Alive = false
	}
	in.Ranks[5].Raised = true
	in.Ranks[5].Ending = "exited with code 1 after RuntimeError: CUDA error at train.py:42 (step)"
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if rep.State != StateDead || h.Category != CatDeadRank || h.Culprits != "5" || h.Collateral != "0-4,6-7" {
		t.Fatalf("%s\n%+v", rep.Summary, h)
	}
}

// TestConflictsHoldTheVerdictAtMedium: when sources disagree (two live
// processes claim one rank, world sizes differ), the culprit is still
// named, but never with high confidence, and the disagreement is said.
func TestConflictsHoldTheVerdictAtMedium(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "default", "pair"), 200)
	if rep := Diagnose(in); rep.Hypotheses[0].Confidence != High {
		t.Fatalf("without conflicts: %s", rep.Summary)
	}
	in.Conflicts = []string{"rank 5 is claimed by two live processes (pids 10 and 11)"}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Culprits != "3" || h.Confidence != Medium || strings.Contains(rep.Summary, "high confidence") ||
		!slices.Contains(rep.DataQuality, "sources disagree: rank 5 is claimed by two live processes (pids 10 and 11)") {
		t.Errorf("%s\n%+v\n%v", rep.Summary, h, rep.DataQuality)
	}
}

// TestAbsentRanksAreSaid: a rank of the job (world size 8) of which
// nothing was found is named, not silently left out; a world size past
// the believable bound does not make a place for every "rank".
func TestAbsentRanksAreSaid(t *testing.T) {
	in := scenario(everyoneBut(3, 2, "default", "pair"), 200)
	delete(in.Ranks, 7)
	rep := Diagnose(in)
	if !slices.ContainsFunc(rep.DataQuality, func(s string) bool { return strings.HasPrefix(s, "rank 7 of the job's 8: no agent and no ring here") }) {
		t.Errorf("%v", rep.DataQuality)
	}
	in.World = 1 << 30
	rep = Diagnose(in)
	if rep.Hypotheses[0].Culprits != "3" || len(rep.doing) > 16 {
		t.Errorf("huge world: %s, %d ranks listed", rep.Summary, len(rep.doing))
	}
}

// TestUserFrameSkipsTheAgent: the agent's own frames are never the job's
// line, installed or run from a source checkout.
func TestUserFrameSkipsTheAgent(t *testing.T) {
	th := &stacks.Thread{Frames: []stacks.Frame{
		{File: "/src/probing-mcp/agent/python/probing_mcp_agent/exits.py", Line: 88, Function: "_shutdown"},
		{File: "/src/probing-mcp/agent/python/probing_mcp_agent/collectives.py", Line: 319, Function: "wrapper"},
		{File: "/job/train.py", Line: 41, Function: "step"},
	}}
	if w := userFrame(th); w == nil || w.File != "/job/train.py" || w.Line != 41 {
		t.Errorf("%+v", w)
	}
}
