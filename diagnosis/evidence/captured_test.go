package evidence

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

func TestWithCapturePlacesAKilledRank(t *testing.T) {
	h, err := history.Open(filepath.Join(t.TempDir(), "h.db"), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	t0 := time.Unix(1_800_000_000, 0)
	add := func(pid int, host string, at time.Time, fn string, raw json.RawMessage) {
		t.Helper()
		rank := 1
		if raw == nil {
			p := stacks.Process{PID: pid, Rank: 1, Threads: []stacks.Thread{
				{Name: "worker", Frames: []stacks.Frame{{Function: "poll", File: "w.py", Line: 3}}},
				{IsMain: true, Name: "MainThread", Frames: []stacks.Frame{{Function: fn, File: "train.py", Line: 7}}}}}
			raw, _ = json.Marshal(p)
		}
		if _, err := h.AddStackCapture(history.StackCapture{TakenAt: at, Host: host, PID: pid, Rank: &rank, Method: "agent", ThreadCount: 2, Stacks: raw}); err != nil {
			t.Fatal(err)
		}
	}
	add(50, "n1", t0, "old_place", nil)
	add(60, "n1", t0.Add(time.Second), "other_pid", nil)                       // an earlier process of the rank
	add(50, "n2", t0.Add(2*time.Second), "other_host", nil)                    // another node's pid 50
	add(50, "n1", t0.Add(3*time.Second), "loader_next", nil)                   // the newest of this process
	add(50, "n1", t0.Add(9*time.Second), "after_the_end", nil)                 // taken after it ended: not its
	add(50, "n1", t0.Add(4*time.Second), "", json.RawMessage(`{"threads":7}`)) // unparsable: skipped, said
	e := &RankEvidence{Rank: 1, PID: 50, EndedNS: t0.Add(5 * time.Second).UnixNano()}
	var problems []string
	withCapture(e, h, "n1", func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) })
	if e.Main == nil || e.Main.Frames[0].Function != "loader_next" || e.MainCapturedNS != t0.Add(3*time.Second).UnixNano() {
		t.Fatalf("main %+v captured at %d", e.Main, e.MainCapturedNS)
	}
	if len(problems) != 1 {
		t.Errorf("problems %q; want the unparsable capture said once", problems)
	}
	// No capture of its pid: nothing is made up.
	e2 := &RankEvidence{Rank: 1, PID: 99}
	withCapture(e2, h, "n1", func(string, ...any) {})
	if e2.Main != nil {
		t.Errorf("pid 99 placed by another process's capture: %+v", e2.Main)
	}
}
