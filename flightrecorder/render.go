package flightrecorder

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Bounds of the text beyond the view's own.
const (
	maxTextLagging  = 8
	maxTextEvidence = 10
	// maxTextFinding: a finding line is the analysis' own and short; a
	// tensor list in it can make one long.
	maxTextFinding    = 4 << 10
	maxTextTranscript = 4096
	// maxTextBytes stops the groups of a view past this much text (a
	// terminal's --verbose page of a thousand groups).
	maxTextBytes = 16 << 20
	// maxToolText stops a tool's page of groups past this much text: the
	// answer stays near 2,000 tokens, and says where the rest is.
	maxToolText = 6 << 10
)

// Text is the one text rendering of a Flight Recorder report, for the
// tools (what the model reads) and the CLI: the verdict and summary, the
// dumps seen, one paragraph per listed process group, the paging,
// fr_trace's view, then data quality. Every list is bounded and every cut
// says how to see the rest, in the reader's words (ViewOptions.Terminal);
// the dump's text is quoted (jobtext).
func (v View) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", v.Verdict, rankset.ShortSets(strings.TrimSpace(v.Summary)))
	rv := v.Ranks
	timing := "timing off"
	if rv.TimingEnabled {
		timing = "timing on"
	}
	fmt.Fprintf(&b, "Dumps: ranks %s", rankset.Short(rv.Dumped))
	if rv.ExpectedWorld > 0 {
		fmt.Fprintf(&b, " of world %d", rv.ExpectedWorld)
	}
	fmt.Fprintf(&b, "; version %s, %s, %s", orDash(rv.Versions), orDash(rv.Formats), timing)
	if rv.MissingDumps != "" {
		b.WriteString("; no dump from " + rankset.Words(rv.MissingDumps))
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "Process groups: %d of %d with a problem", v.ProblemGroups, v.TotalGroups)
	if n := len(v.ProcessGroups); n > 0 {
		fmt.Fprintf(&b, "; listed %d-%d", v.Offset+1, v.Offset+n)
	}
	b.WriteString(".\n")
	for i, g := range v.ProcessGroups {
		if v.term != nil && b.Len() > maxTextBytes {
			fmt.Fprintf(&b, "… the text stops here, past %d bytes: %d more listed group(s) not shown (--json, --pg or --ranks say the rest).\n", maxTextBytes, len(v.ProcessGroups)-i)
			break
		}
		if v.term == nil && i > 0 && b.Len() > maxToolText {
			fmt.Fprintf(&b, "… the text stops here, past %d bytes: %d more group(s) of this page not shown; call again with offset=%d (structured content: process_groups has them).\n",
				maxToolText, len(v.ProcessGroups)-i, v.Offset+i)
			break
		}
		v.writeGroup(&b, g)
	}
	if v.Truncated {
		if v.term != nil {
			fmt.Fprintf(&b, "More groups: %d not listed; --pg or --ranks narrows the analysis.\n", v.TotalGroups-v.HealthyOmitted-v.NextOffset)
		} else {
			fmt.Fprintf(&b, "More groups: call again with the same arguments and offset=%d.\n", v.NextOffset)
		}
	}
	if v.Hint != "" {
		b.WriteString(v.Hint + ".\n")
	}
	if v.term != nil && len(v.term.transcript) > 0 {
		b.WriteString("fr_trace transcript:\n")
		for i, l := range v.term.transcript {
			if i == maxTextTranscript {
				fmt.Fprintf(&b, "  … %d more line(s) (--json)\n", len(v.term.transcript)-i)
				break
			}
			b.WriteString("  " + jobtext.Quote(l, 1<<10) + "\n") // fr_trace's output, the dump's text in it
		}
	}
	v.writeQuality(&b)
	return b.String()
}

// writeQuality is what limited the analysis, and what torch's fr_trace
// would say where it matters: once each, not per group.
func (v View) writeQuality(b *strings.Builder) {
	dq, ft := v.DataQuality, v.FRTrace
	if !dq.Partial && len(dq.FileProblems) == 0 && len(dq.Warnings) == 0 && ft.Aborted == "" && ft.NotReplayed == "" && len(ft.Differs) == 0 {
		return
	}
	b.WriteString("Data quality:")
	if dq.Partial {
		b.WriteString(" partial (some dumps unreadable or missing)")
	}
	b.WriteString("\n")
	for _, p := range dq.FileProblems {
		b.WriteString("  file: " + jobtext.CutLine(p, 200) + "\n")
	}
	for _, w := range dq.Warnings {
		b.WriteString("  warning: " + jobtext.CutLine(w, 300) + "\n")
	}
	if dq.Truncated {
		fmt.Fprintf(b, "  … listed %d of %d file problem(s) and %d of %d warning(s)", len(dq.FileProblems), dq.TotalProblems, len(dq.Warnings), dq.TotalWarnings)
		if v.term != nil {
			b.WriteString(" (--json lists them)")
		}
		b.WriteString("\n")
	}
	if ft.Aborted != "" {
		b.WriteString("  fr_trace (torch's analyzer) would stop on these dumps: " + jobtext.Quote(ft.Aborted, jobtext.Line)) // its words, the dump's text in them
		if v.term != nil && v.term.allowIncomplete && ft.NotReplayed == "" {
			b.WriteString(" (with --allow-incomplete-ranks it goes on; its verdicts are compared per group)")
		}
		b.WriteString("\n")
	}
	if ft.NotReplayed != "" {
		b.WriteString("  " + jobtext.CutLine(ft.NotReplayed, 300) + "\n")
	}
	for _, d := range ft.Differs {
		b.WriteString("  " + jobtext.Cut(d, 600) + "\n")
	}
}

func (v View) writeGroup(b *strings.Builder, g GroupView) {
	fmt.Fprintf(b, "[%s, ranks %s] %s", PGLabel(g.PGName, g.PGDesc), rankset.Short(g.Ranks), g.Verdict)
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
		b.WriteString("  " + jobtext.Cut(rankset.ShortSets(g.Finding), maxTextFinding) + "\n")
	}
	for i, l := range g.Lagging {
		if i == maxTextLagging {
			b.WriteString(v.more(len(g.Lagging)-i, "lagging rank(s)", "lagging_ranks"))
			break
		}
		b.WriteString("  lagging: " + l + "\n")
	}
	for _, f := range g.OtherFindings {
		b.WriteString("  also: " + jobtext.CutLine(rankset.ShortSets(f), 300) + "\n")
	}
	if len(g.CulpritStack) > 0 {
		at := g.CulpritStackAt
		if at == "" {
			at = "culprit stack"
		}
		b.WriteString("  " + at + ": " + strings.Join(g.CulpritStack, " ← ") + "\n")
	}
	if len(g.PeerStack) > 0 {
		b.WriteString("  peer stack: " + strings.Join(g.PeerStack, " ← ") + "\n")
	}
	for i, e := range g.Evidence {
		if i == maxTextEvidence {
			b.WriteString(v.more(len(g.Evidence)-i, "evidence line(s)", "evidence"))
			break
		}
		b.WriteString("  evidence: " + jobtext.Quote(e, jobtext.Line) + "\n") // fr_trace's words, the dump's text in them
	}
	if g.FRTrace != "" {
		b.WriteString("  fr_trace: " + jobtext.CutLine(g.FRTrace, 600) + "\n")
	}
}

// more says a group's list was cut and where the rest is: the tools'
// structured content, or analyze's --json.
func (v View) more(n int, what, field string) string {
	if v.term != nil {
		return fmt.Sprintf("  … %d more %s (--json lists them)\n", n, what)
	}
	return fmt.Sprintf("  … %d more %s in structured content: %s\n", n, what, field)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// StackToShow picks the frames of a recorded stack worth reading first. A
// C++ stack (TORCH_NCCL_TRACE_CPP_STACK=1) starts with a dozen or more of
// torch's own native frames; its Python frames, where the job called the
// collective, are shown, and the native ones only counted. A stack of one
// kind is shown whole.
func StackToShow(frames []Frame) (shown []Frame, nativeOmitted int) {
	var py []Frame
	for _, f := range frames {
		if strings.HasSuffix(f.Filename, ".py") {
			py = append(py, f)
		}
	}
	if len(py) == 0 || len(py) == len(frames) {
		return frames, 0
	}
	return py, len(frames) - len(py)
}
