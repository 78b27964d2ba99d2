package tools

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// maxTextFailed bounds the failed snapshots listed.
const maxTextFailed = 5

// ModelText is the report as flightrecorder renders it for every reader
// (fr.View.Text: the verdict, the dumps, the groups, the paging, fr_trace,
// data quality), then where the verdict was stored.
func (r AnalyzeFlightRecorderResult) ModelText() string {
	var b strings.Builder
	r.writeText(&b)
	return b.String()
}

func (r AnalyzeFlightRecorderResult) writeText(b *strings.Builder) {
	b.WriteString(r.View.Text())
	if r.HistoryID > 0 {
		fmt.Fprintf(b, "Stored: history.diagnoses id %d\n", r.HistoryID)
	}
}

// ModelText is the analysis of the live snapshots (as
// analyze_flight_recorder's), then what was captured and stored, the
// processes that failed, and the whole-job coverage.
func (r SnapshotFlightRecorderResult) ModelText() string {
	var b strings.Builder
	r.AnalyzeFlightRecorderResult.writeText(&b)
	var ranks, pids []int
	var ids []int64
	bytes := 0
	for _, s := range r.Snapshots {
		if s.Rank >= 0 {
			ranks = append(ranks, s.Rank)
		} else if s.PID > 0 {
			pids = append(pids, s.PID)
		}
		if s.HistoryID > 0 {
			ids = append(ids, s.HistoryID)
		}
		bytes += s.Bytes
	}
	fmt.Fprintf(&b, "Snapshots: %d (", len(r.Snapshots))
	if len(ranks) > 0 {
		b.WriteString(rankset.Words(rankset.Format(ranks)))
	}
	if len(pids) > 0 {
		if len(ranks) > 0 {
			b.WriteString(", ")
		}
		b.WriteString("rankless pids " + rankset.Short(rankset.Format(pids)))
	}
	fmt.Fprintf(&b, "), %d byte(s) of dumps", bytes)
	if len(ids) > 0 {
		b.WriteString("; stored as history.fr_snapshots id(s) " + ints64Set(ids))
	}
	b.WriteString(".\n")
	if len(r.Failed) > 0 {
		fmt.Fprintf(&b, "Failed: %d:\n", len(r.Failed))
		for i, f := range r.Failed {
			if i == maxTextFailed {
				fmt.Fprintf(&b, "  … %d more in structured content: failed\n", len(r.Failed)-i)
				break
			}
			b.WriteString("  " + clip(f, 300) + "\n")
		}
	}
	b.WriteString(coverageText(r.Coverage))
	return b.String()
}
