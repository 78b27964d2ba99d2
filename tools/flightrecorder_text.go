package tools

import (
	"fmt"
	"strings"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Bounds of the Flight Recorder tools' text (the view's lists are bounded
// already; detail=full's lagging ranks and evidence are not).
const (
	maxTextLagging  = 8
	maxTextEvidence = 10
	maxTextFailed   = 5
)

// ModelText is the verdict and summary, the dumps seen, one paragraph per
// listed process group, the paging, fr_trace's view, then data quality.
func (r AnalyzeFlightRecorderResult) ModelText() string {
	var b strings.Builder
	r.writeText(&b)
	return b.String()
}

func (r AnalyzeFlightRecorderResult) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "%s: %s\n", r.Verdict, shortSets(strings.TrimSpace(r.Summary)))
	rv := r.Ranks
	timing := "timing off"
	if rv.TimingEnabled {
		timing = "timing on"
	}
	fmt.Fprintf(b, "Dumps: ranks %s", rankset.Short(rv.Dumped))
	if rv.ExpectedWorld > 0 {
		fmt.Fprintf(b, " of world %d", rv.ExpectedWorld)
	}
	fmt.Fprintf(b, "; version %s, %s, %s", orDash(rv.Versions), orDash(rv.Formats), timing)
	if rv.MissingDumps != "" {
		b.WriteString("; no dump from " + rankset.Words(rv.MissingDumps))
	}
	b.WriteString(".\n")
	fmt.Fprintf(b, "Process groups: %d of %d with a problem", r.ProblemGroups, r.TotalGroups)
	if n := len(r.ProcessGroups); n > 0 {
		fmt.Fprintf(b, "; listed %d-%d", r.Offset+1, r.Offset+n)
	}
	b.WriteString(".\n")
	for _, g := range r.ProcessGroups {
		writeGroup(b, g)
	}
	if r.Truncated {
		fmt.Fprintf(b, "More groups: call again with the same arguments and offset=%d.\n", r.NextOffset)
	}
	if r.Hint != "" {
		b.WriteString(r.Hint + ".\n")
	}
	if r.FRTrace.Aborted != "" {
		b.WriteString("fr_trace would stop: " + jobtext.Quote(r.FRTrace.Aborted, jobtext.Line) + "\n") // its words, the dump's text in them
	}
	if r.FRTrace.NotReplayed != "" {
		b.WriteString(clip(r.FRTrace.NotReplayed, 300) + "\n")
	}
	if r.FRTrace.Disagreements > 0 {
		fmt.Fprintf(b, "fr_trace differs from this analysis in %d group(s) (each group's fr_trace line says how).\n", r.FRTrace.Disagreements)
	}
	dq := r.DataQuality
	if dq.Partial || len(dq.FileProblems) > 0 || len(dq.Warnings) > 0 {
		b.WriteString("Data quality:")
		if dq.Partial {
			b.WriteString(" partial (some dumps unreadable or missing)")
		}
		b.WriteString("\n")
		for _, p := range dq.FileProblems {
			b.WriteString("  file: " + clip(p, 200) + "\n")
		}
		for _, w := range dq.Warnings {
			b.WriteString("  warning: " + clip(w, 200) + "\n")
		}
		if dq.Truncated {
			fmt.Fprintf(b, "  … listed %d of %d file problem(s) and %d of %d warning(s)\n", len(dq.FileProblems), dq.TotalProblems, len(dq.Warnings), dq.TotalWarnings)
		}
	}
	if r.HistoryID > 0 {
		fmt.Fprintf(b, "Stored: history.diagnoses id %d\n", r.HistoryID)
	}
}

func writeGroup(b *strings.Builder, g GroupView) {
	fmt.Fprintf(b, "[%s, ranks %s] %s", fr.PGLabel(g.PGName, g.PGDesc), rankset.Short(g.Ranks), g.Verdict)
	if g.Kind != "" {
		fmt.Fprintf(b, " (%s, %s confidence)", g.Kind, orDash(g.Confidence))
	}
	if g.CollectiveSeqID > 0 || g.ProfilingName != "" {
		fmt.Fprintf(b, " at collective #%d", g.CollectiveSeqID)
		if g.ProfilingName != "" {
			b.WriteString(" " + jobtext.Quote(g.ProfilingName, jobtext.Name))
		}
	}
	if g.CulpritRanks != "" {
		b.WriteString("; culprits " + rankset.Short(g.CulpritRanks))
	}
	if g.MissingRanks != "" {
		b.WriteString("; missing " + rankset.Short(g.MissingRanks))
	}
	if g.MissingDumps != "" {
		b.WriteString("; no dump from " + rankset.Short(g.MissingDumps))
	}
	b.WriteString("\n")
	if g.Finding != "" {
		b.WriteString("  " + shortSets(g.Finding) + "\n")
	}
	for i, l := range g.Lagging {
		if i == maxTextLagging {
			fmt.Fprintf(b, "  … %d more lagging rank(s) in structured content: lagging_ranks\n", len(g.Lagging)-i)
			break
		}
		b.WriteString("  lagging: " + l + "\n")
	}
	for _, f := range g.OtherFindings {
		b.WriteString("  also: " + clip(shortSets(f), 300) + "\n")
	}
	if len(g.CulpritStack) > 0 {
		b.WriteString("  culprit stack: " + strings.Join(g.CulpritStack, " ← ") + "\n")
	}
	if len(g.PeerStack) > 0 {
		b.WriteString("  peer stack: " + strings.Join(g.PeerStack, " ← ") + "\n")
	}
	for i, e := range g.Evidence {
		if i == maxTextEvidence {
			fmt.Fprintf(b, "  … %d more evidence line(s) in structured content: evidence\n", len(g.Evidence)-i)
			break
		}
		b.WriteString("  evidence: " + jobtext.Quote(e, jobtext.Line) + "\n") // fr_trace's words, the dump's text in them
	}
	if g.FRTrace != "" {
		b.WriteString("  fr_trace: " + clip(g.FRTrace, 600) + "\n")
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
