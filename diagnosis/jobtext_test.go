package diagnosis

import (
	"encoding/json"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// TestReportQuotesJobText: issue 23. Whatever the job wrote into its
// frames, thread names, exceptions and ring ops, the report's text shows
// it only quoted, escaped and clipped, and stays bounded; so does its
// JSON once bound.
func TestReportQuotesJobText(t *testing.T) {
	h := jobtexttest.Hostile()
	hostileThreads := func(in *Input, r int) {
		f := in.Ranks[r]
		f.Main = &stacks.Thread{IsMain: true, Name: h, State: h, WChan: h, Frames: []stacks.Frame{{File: "/job/" + h, Line: 3, Function: h}, {File: "/job/train.py", Line: 9, Function: "main"}}}
		f.Threads = []stacks.Thread{*f.Main, {Name: h, Frames: []stacks.Frame{{File: h, Line: 1, Function: h}}}}
	}
	for _, c := range []struct {
		name string
		in   func() Input
	}{
		{"culprit's frames and threads", func() Input {
			in := scenario(everyoneBut(3, 2, "default", "pair"), 200)
			hostileThreads(&in, 3)
			return in
		}},
		{"dead ranks' exceptions", func() Input {
			in := scenario(everyoneBut(3, 2, "default", "pair"), 200)
			for r, f := range in.Ranks {
				x := &procfacts.ExitRecord{Type: h, Message: h, TimeNS: int64(r), Thread: &procfacts.ExitThread{Name: h, IsMain: true},
					Frames: []procfacts.ExitFrame{{File: "/job/" + h, Line: 3, Function: h}}}
				rec := &procfacts.Ending{Exception: x, Exceptions: 1}
				f.Alive, f.Record, f.Raised, f.Ending, f.EndedNS = false, rec, true, rec.Summary(false), f.NowNS-int64(10-r)*1e9
			}
			hostileThreads(&in, 3)
			return in
		}},
		{"ring ops and groups", func() Input {
			in := scenario(everyoneBut(3, 2, "default", "pair"), 200)
			for i := range in.Comm {
				in.Comm[i].Op = h
			}
			return in
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := Diagnose(c.in())
			rep.Bound()
			jobtexttest.Check(t, c.name, rep.Text(), 16<<10)
			b, _ := json.Marshal(rep)
			if len(b) > 64<<10 {
				t.Errorf("%d bytes of JSON", len(b))
			}
			rows, _ := rep.RankRows(0, 1000)
			for _, r := range rows {
				jobtexttest.CheckSafe(t, "doing", r.Doing, 2<<10)
			}
		})
	}
}
