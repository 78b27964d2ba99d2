package tools

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

func frEnv(t *testing.T, spec frsynth.Spec) (*Env, string) {
	t.Helper()
	dir := t.TempDir()
	if err := frsynth.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	files, err := NewFilePolicy(func(k string) string {
		if k == "PROBING_ALLOWED_FILE_DIRS" {
			return dir
		}
		return ""
	}, dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Files: files, MaxFileBytes: 64 << 20}, dir
}

func callFR(t *testing.T, env *Env, args map[string]any) AnalyzeFlightRecorderResult {
	t.Helper()
	r, err := analyzeFlightRecorder(env).Call(context.Background(), args)
	if err != nil {
		t.Fatal(err)
	}
	return r.(AnalyzeFlightRecorderResult)
}

// TestAnalyzeFlightRecorderText: 256 ranks in tensor-parallel groups of 8,
// rank 37 gone missing at #40. The text leads with the verdict, names the
// culprit group, its collective and ranks, and a page cut by limit says
// the offset to pass next.
func TestAnalyzeFlightRecorderText(t *testing.T) {
	env, dir := frEnv(t, frsynth.Spec{Ranks: 256, Entries: 60, TP: 8, Frames: true, Fault: frsynth.Fault{Kind: "missing", Rank: 37, Seq: 40}})
	res := callFR(t, env, map[string]any{"paths": []any{dir}})
	_, textLen := sizes(t, "analyze_flight_recorder", res)
	text := res.ModelText()
	if !strings.HasPrefix(text, "MISSING_RANKS: ") {
		t.Errorf("first line: %s", text)
	}
	// The culprit's recorded stack is labelled for what it is: the stack
	// of its last recorded collective, not where the rank is now. fr_trace
	// agrees here, so it is not mentioned.
	for _, want := range []string{"Dumps: ranks 0-255", "culprits 37", "MISSING_RANKS",
		"rank 37's stack at its last recorded collective #39 ⟦nccl:all_reduce⟧ (pg ⟦0⟧ (⟦default_pg⟧), Flight Recorder), 10 ms before the last recorded event; not where it is now: "} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "fr_trace") || strings.Contains(text, "culprit stack") {
		t.Errorf("fr_trace agrees, and the stack is not the rank's now:\n%s", text)
	}
	if textLen > 4096 {
		t.Errorf("summary text %d bytes:\n%s", textLen, text)
	}

	full := callFR(t, env, map[string]any{"paths": []any{dir}, "detail": "full", "limit": 2})
	_, fullLen := sizes(t, "analyze_flight_recorder full", full)
	text = full.ModelText()
	if !full.Truncated || !strings.Contains(text, fmt.Sprintf("More groups: call again with the same arguments and offset=%d.", full.NextOffset)) {
		t.Errorf("page cut not said (truncated %v, next %d):\n%s", full.Truncated, full.NextOffset, text)
	}
	if !strings.Contains(text, "listed 1-2") || fullLen > 8192 {
		t.Errorf("full page, %d bytes:\n%s", fullLen, text)
	}
	if full.HistoryID != 0 || strings.Contains(text, "Stored:") {
		t.Errorf("no history was configured: %d", full.HistoryID)
	}

	// The live snapshot's text: the same analysis, then what was captured
	// and what failed.
	snap := SnapshotFlightRecorderResult{AnalyzeFlightRecorderResult: res,
		Snapshots: []SnapshotView{{PID: 100, Rank: 0, Records: 60, Bytes: 4000, HistoryID: 3}, {PID: 101, Rank: 1, Records: 60, Bytes: 4000, HistoryID: 4}},
		Failed:    []string{"pid 102 (rank 2): agent timed out after 2s; the dump pipe is not a FIFO"}}
	sizes(t, "snapshot_flight_recorder", snap)
	text = snap.ModelText()
	for _, want := range []string{"MISSING_RANKS: ", "Snapshots: 2 (ranks 0-1), 8000 byte(s) of dumps; stored as history.fr_snapshots id(s) 3-4.", "Failed: 1:\n  pid 102 (rank 2): agent timed out"} {
		if !strings.Contains(text, want) {
			t.Errorf("snapshot text lacks %q:\n%s", want, text)
		}
	}
}

// TestAnalyzeFlightRecorderCppStacks: with C++ stacks the culprit's stack
// starts where the job called the collective, not in torch's native
// frames, in the summary and in detail=full.
func TestAnalyzeFlightRecorderCppStacks(t *testing.T) {
	env, dir := frEnv(t, frsynth.Spec{Ranks: 16, Entries: 60, TP: 4, CppStack: true, Fault: frsynth.Fault{Kind: "missing", Rank: 5, Seq: 40}})
	for _, detail := range []string{"summary", "full"} {
		res := callFR(t, env, map[string]any{"paths": []any{dir}, "detail": detail})
		text := res.ModelText()
		if !strings.Contains(text, "⟦all_reduce⟧ at ⟦torch/distributed/distributed_c10d.py⟧:2950") || strings.Contains(text, "CapturedTraceback") {
			t.Errorf("%s:\n%s", detail, text)
		}
		if detail == "full" && !strings.Contains(text, "(17 native frames not shown)") {
			t.Errorf("full: the native frames are not counted:\n%s", text)
		}
	}
}
