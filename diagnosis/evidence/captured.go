package evidence

import (
	"encoding/json"

	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// SnapshotRow is d as history.fr_snapshots keeps it (get_stacks'
// snapshot tool and the watcher's captures alike).
func SnapshotRow(d FRDump, source string) history.Snapshot {
	var rank *int
	if d.Rank >= 0 {
		r := d.Rank
		rank = &r
	}
	format := d.Format
	if format == "" {
		format = "pickle"
	}
	return history.Snapshot{Host: d.Host, PID: d.PID, Rank: rank, WorldSize: d.WorldSize,
		Source: source, Format: format, TraceVersion: d.Version, Entries: d.Records, Data: d.Data, Note: d.DumpFunction}
}

// capturesRead bounds the stack captures read per dead rank: the newest
// few of its rank, of which the one of its pid counts.
const capturesRead = 8

// withCapture places a dead rank that left no stack (a SIGKILL, a
// scheduler's time limit) where the watcher last captured it while it
// lived: the newest capture of the same rank and pid on this host, taken
// before the process ended. The history is this server's own file; its
// JSON is parsed as any stack answer is, and a capture that does not parse
// is skipped and said.
func withCapture(e *RankEvidence, h *history.Store, host string, problem func(string, ...any)) {
	r := e.Rank
	caps, err := h.StackCaptures(history.ListOptions{Rank: &r, Limit: capturesRead})
	if err != nil {
		problem("rank %d: the history's stack captures: %v", r, err)
		return
	}
	for _, c := range caps {
		if c.PID != e.PID || (host != "" && c.Host != "" && c.Host != host) || len(c.Stacks) == 0 {
			continue
		}
		at := c.TakenAt.UnixNano()
		if e.EndedNS > 0 && at > e.EndedNS {
			continue
		}
		var p stacks.Process
		if err := json.Unmarshal(c.Stacks, &p); err != nil {
			problem("rank %d: stack capture %d in the history does not parse: %v", r, c.ID, err)
			continue
		}
		for i := range p.Threads {
			if p.Threads[i].IsMain {
				t := p.Threads[i]
				e.Main, e.MainCapturedNS = &t, at
				return
			}
		}
	}
}
