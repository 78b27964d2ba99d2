package flightrecorder

import (
	"fmt"
	"slices"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// View is a report condensed and paged for a reader with little room (a
// model's context, a terminal): rank sets are ranges, groups are paged,
// long lists are cut and say so. It is the structured content of the
// Flight Recorder tools, and its Text is the one text rendering of a
// report, for the tools and the CLI alike.
type View struct {
	Summary        string          `json:"summary"`
	Verdict        string          `json:"verdict"`
	Ranks          ViewRanks       `json:"ranks"`
	Across         *ViewAcross     `json:"across_groups,omitempty"`
	ProcessGroups  []GroupView     `json:"process_groups"`
	TotalGroups    int             `json:"total_groups"`
	ProblemGroups  int             `json:"problem_groups"`
	HealthyOmitted int             `json:"healthy_groups_omitted"`
	Offset         int             `json:"offset"`
	NextOffset     int             `json:"next_offset,omitempty"`
	Truncated      bool            `json:"truncated"`
	FRTrace        ViewFRTrace     `json:"fr_trace"`
	DataQuality    ViewDataQuality `json:"data_quality"`
	Hint           string          `json:"hint,omitempty"`

	// term is set for a terminal (ViewOptions.Terminal). Unexported: it
	// is in neither the tools' JSON nor their schema.
	term *terminal
}

// terminal is what only probing-mcp analyze's text shows: its hints name
// the CLI's flags, and it has what those flags did.
type terminal struct {
	transcript      []string // fr_trace's log (--verbose)
	allowIncomplete bool     // fr_trace went on past missing dumps
}

// ViewAcross is the reading across groups (Report.Across), its rank
// sets as ranges.
type ViewAcross struct {
	Kind     string `json:"kind"`
	Culprits string `json:"culprits,omitempty"`
	Victims  string `json:"victims,omitempty"`
	Line     string `json:"line"`
}

// ViewRanks says which ranks were analysed.
type ViewRanks struct {
	Dumped        string `json:"dumped"`
	MissingDumps  string `json:"missing_dumps,omitempty"`
	ExpectedWorld int    `json:"expected_world_size"`
	Versions      string `json:"versions"`
	Formats       string `json:"formats"`
	TimingEnabled bool   `json:"timing_enabled"`
}

// GroupView is one process group's verdict.
type GroupView struct {
	PGName          string   `json:"pg_name"`
	PGDesc          string   `json:"pg_desc"`
	Ranks           string   `json:"ranks"`
	Verdict         string   `json:"verdict"`
	Kind            string   `json:"kind"`
	Confidence      string   `json:"confidence"`
	CollectiveSeqID int64    `json:"collective_seq_id"`
	ProfilingName   string   `json:"profiling_name,omitempty"`
	MissingRanks    string   `json:"missing_ranks,omitempty"`
	CulpritRanks    string   `json:"culprit_ranks,omitempty"`
	MissingDumps    string   `json:"missing_dumps,omitempty"`
	Finding         string   `json:"finding"`
	Lagging         []string `json:"lagging_ranks,omitempty"`
	OtherFindings   []string `json:"other_findings,omitempty"`
	// CulpritStackAt says whose stack CulpritStack is and from when: the
	// entry that recorded it, never the rank's stack now.
	CulpritStackAt string   `json:"culprit_stack_at,omitempty"`
	CulpritStack   []string `json:"culprit_stack,omitempty"`
	PeerStack      []string `json:"peer_stack,omitempty"`
	Evidence       []string `json:"evidence,omitempty"`
	FRTrace        string   `json:"fr_trace"`
}

// ViewFRTrace is what torch's own analyzer would conclude.
type ViewFRTrace struct {
	Aborted       string `json:"aborted,omitempty"`
	NotReplayed   string `json:"not_replayed,omitempty"`
	Disagreements int    `json:"groups_where_we_differ"`
	// Differs says, for the groups where fr_trace would name another
	// culprit or another collective (FRTraceNote.Matters), what it would
	// say; bounded.
	Differs []string `json:"differs,omitempty"`
}

// ViewDataQuality lists what limited the analysis, bounded.
type ViewDataQuality struct {
	Partial       bool     `json:"partial"`
	FileProblems  []string `json:"file_problems,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
	TotalProblems int      `json:"total_file_problems"`
	TotalWarnings int      `json:"total_warnings"`
	Truncated     bool     `json:"truncated"`
}

// ViewOptions pick a view's page and its reader.
type ViewOptions struct {
	// Full lists healthy groups too, with every lagging rank, the culprit's
	// and peers' stacks, the evidence and fr_trace's reasons.
	Full bool
	// Offset skips that many listed groups; Limit lists at most that many
	// (0: 10, or 5 with Full).
	Offset, Limit int
	// Terminal is for probing-mcp analyze: the hints name its flags
	// (--verbose, --json, --pg) instead of the tools' arguments, and the
	// text adds fr_trace's transcript when the report has it.
	Terminal bool
}

// TerminalView is probing-mcp analyze's page: the worst 100 problem
// groups, or (verbose) every group up to 1024 with its details, in the
// CLI's words.
func TerminalView(verbose bool) ViewOptions {
	o := ViewOptions{Full: verbose, Limit: 100, Terminal: true}
	if verbose {
		o.Limit = 1024
	}
	return o
}

// Bounds of a view.
const (
	maxViewDQ        = 8
	maxViewDiffers   = 3
	maxViewLagging   = 3 // in summary; Full lists every lagging rank the report kept
	maxViewFrames    = 8
	maxViewSummary   = 2000
	maxViewAborted   = 2000
	maxViewEvidence  = 50 // one per wrapped ring in a large job
	maxViewEvidenceB = 2000
	// maxViewSet bounds a rank set: a group of a million members, every
	// other one without a dump, is megabytes of ranges.
	maxViewSet = 1024
)

// View pages and condenses the report. Without Full only groups with a
// problem are listed; healthy ones are counted.
func (r *Report) View(o ViewOptions) View {
	if o.Limit <= 0 {
		o.Limit = 10
		if o.Full {
			o.Limit = 5
		}
	}
	o.Offset = max(o.Offset, 0)
	askFull := "detail=full" // how the reader asks for Full
	if o.Terminal {
		askFull = "--verbose"
	}
	v := View{
		Summary: jobtext.CutLine(r.Summary, maxViewSummary), Verdict: r.Verdict, TotalGroups: len(r.ProcessGroups), Offset: o.Offset,
		Ranks: ViewRanks{Dumped: r.Ranks.DumpedText, MissingDumps: viewSet(r.Ranks.MissingDump), ExpectedWorld: r.Ranks.Expected,
			Versions: r.Ranks.Versions, Formats: r.Ranks.Formats, TimingEnabled: r.Ranks.TimingOn},
		ProcessGroups: []GroupView{},
		FRTrace:       ViewFRTrace{Aborted: jobtext.CutLine(r.FRTrace.Aborted, maxViewAborted), NotReplayed: r.FRTrace.Skipped},
	}
	if x := r.Across; x != nil {
		v.Across = &ViewAcross{Kind: x.Kind, Culprits: viewSet(x.Culprits), Victims: viewSet(x.Victims), Line: jobtext.CutLine(x.Line, maxViewSummary)}
	}
	if o.Terminal {
		v.term = &terminal{allowIncomplete: r.FRTrace.UsedAllowIncomplete}
		if o.Full {
			v.term.transcript = r.FRTrace.Transcript
		}
	}
	var listed []PGReport
	for _, pr := range r.ProcessGroups {
		if pr.Finding.Kind != KindHealthy {
			v.ProblemGroups++
		}
		if pr.FRTrace != nil && !pr.FRTrace.Agrees {
			v.FRTrace.Disagreements++
		}
		if pr.FRTrace.Matters(&pr) {
			if len(v.FRTrace.Differs) == maxViewDiffers {
				v.FRTrace.Differs = append(v.FRTrace.Differs, "… more groups (the analysis' JSON has every group's fr_trace)")
			} else if len(v.FRTrace.Differs) < maxViewDiffers {
				v.FRTrace.Differs = append(v.FRTrace.Differs, differsLine(pr))
			}
		}
		if o.Full || pr.Finding.Kind != KindHealthy {
			listed = append(listed, pr)
		} else {
			v.HealthyOmitted++
		}
	}
	for i := o.Offset; i < len(listed) && i < o.Offset+o.Limit; i++ {
		v.ProcessGroups = append(v.ProcessGroups, groupView(listed[i], o.Full, askFull))
	}
	if o.Offset+o.Limit < len(listed) {
		v.Truncated, v.NextOffset = true, o.Offset+o.Limit
	}
	if v.HealthyOmitted > 0 {
		v.Hint = fmt.Sprintf("%d healthy group(s) not listed; %s lists every group with lagging ranks and stacks", v.HealthyOmitted, askFull)
	}
	dq := r.DataQuality
	v.DataQuality = ViewDataQuality{Partial: dq.Partial, TotalProblems: len(dq.Files), TotalWarnings: len(dq.Warnings)}
	for i, fp := range dq.Files {
		if i == maxViewDQ {
			v.DataQuality.Truncated = true
			break
		}
		v.DataQuality.FileProblems = append(v.DataQuality.FileProblems, fp.Text())
	}
	warnings := pgConfigOnce(dq.Warnings)
	v.DataQuality.TotalWarnings = len(warnings)
	for i, w := range warnings {
		if i == maxViewDQ {
			v.DataQuality.Truncated = true
			break
		}
		v.DataQuality.Warnings = append(v.DataQuality.Warnings, w)
	}
	return v
}

// differsLine is what fr_trace would say of a group where it names
// another culprit or collective, and why the two differ.
func differsLine(pr PGReport) string {
	n := pr.FRTrace
	line := fmt.Sprintf("%s: fr_trace would say %s", PGLabel(pr.PGName, pr.PGDesc), n.Verdict)
	if n.Seq != 0 {
		line += fmt.Sprintf(" at #%d", n.Seq)
	}
	if len(n.CulpritRanks) > 0 {
		line += " blaming " + viewSet(n.CulpritRanks)
	}
	line += fmt.Sprintf("; here %s at #%d", pr.Verdict, pr.CollectiveSeqID)
	if len(pr.CulpritRanks) > 0 {
		line += " blaming " + viewSet(pr.CulpritRanks)
	}
	if n.Why != "" {
		line += " (" + jobtext.CutLine(n.Why, 300) + ")"
	}
	return line
}

// pgConfigOnce says the pg_config warnings of a dump set in one line:
// gloo's recorder leaves pg_config unusable, and a line per group about it
// is noise. The other warnings are kept as they are.
func pgConfigOnce(ws []string) []string {
	var out, notes, absent []string
	for _, w := range ws {
		switch {
		case strings.Contains(w, " is not in pg_config; "):
			absent = append(absent, w[:strings.Index(w, " is not in pg_config; ")])
		case strings.Contains(w, "pg_config"):
			notes = append(notes, w)
		default:
			out = append(out, w)
		}
	}
	if len(notes)+len(absent) <= 1 {
		return append(append(notes, absent...), out...)
	}
	line := "pg_config: "
	if len(notes) > 0 {
		line += strings.Join(notes, "; ")
	}
	if len(absent) > 0 {
		if len(notes) > 0 {
			line += "; "
		}
		shown := absent[:min(len(absent), 5)]
		line += fmt.Sprintf("%d group(s) not in it (%s", len(absent), strings.Join(shown, ", "))
		if len(absent) > len(shown) {
			line += ", …"
		}
		line += "), their members inferred from the entries"
	}
	return append([]string{line}, out...)
}

func viewSet(ranks []int) string { return rankset.FormatMax(ranks, maxViewSet) }

// groupView condenses one group; askFull is how the reader asks for the
// details a summary leaves out.
func groupView(pr PGReport, full bool, askFull string) GroupView {
	// The names are the dump's text: clipped (a group whose name is
	// longer is picked by its ranks, not by pg).
	g := GroupView{PGName: jobtext.Clip(pr.PGName, 1<<10), PGDesc: jobtext.Clip(pr.PGDesc, 1<<10), Ranks: pr.MembersText, Verdict: pr.Verdict, Kind: pr.Finding.Kind,
		Confidence: pr.Finding.Confidence, CollectiveSeqID: pr.CollectiveSeqID, ProfilingName: jobtext.Clip(pr.ProfilingName, jobtext.Func),
		MissingRanks: viewSet(pr.MissingRanks), CulpritRanks: viewSet(pr.CulpritRanks),
		MissingDumps: viewSet(pr.MissingDumps), Finding: pr.Finding.Line}
	nLag := maxViewLagging
	if full {
		nLag = len(pr.LaggingRanks)
	}
	// A rank without a dump is missing, said once (missing_dumps): a lag
	// row for it would read as a second problem.
	lagging := slices.DeleteFunc(slices.Clone(pr.LaggingRanks), func(l Lag) bool { return slices.Contains(pr.MissingDumps, l.Rank) })
	for i, l := range lagging {
		if i == nLag {
			g.Lagging = append(g.Lagging, fmt.Sprintf("... %d more (%s)", len(lagging)-nLag, askFull))
			break
		}
		line := fmt.Sprintf("rank %d: enqueued #%d, completed #%d, behind %d", l.Rank, l.LastEnqueued, l.LastCompleted, l.Behind)
		if l.Note != "" {
			line += " (" + l.Note + ")"
		}
		g.Lagging = append(g.Lagging, line)
	}
	// fr_trace per group only with full detail, and only where it differs
	// from the verdict; where that matters, data quality says it once.
	if n := pr.FRTrace; n != nil && full && !n.Agrees && n.Verdict != "ABORTED" {
		g.FRTrace = "says " + n.Verdict
		if len(n.CulpritRanks) > 0 {
			g.FRTrace += " (culprits " + viewSet(n.CulpritRanks) + ")"
		}
		g.FRTrace += ": " + jobtext.Quote(n.Why, jobtext.Line) // its words, the dump's text in them
	}
	for _, f := range pr.Secondary {
		g.OtherFindings = append(g.OtherFindings, f.Kind+": "+f.Line)
	}
	if a := pr.Arrival; a != nil {
		g.OtherFindings = append(g.OtherFindings, "arrivals: "+a.Line)
	}
	if len(pr.CulpritFrames) > 0 {
		g.CulpritStackAt = stackAt(pr)
	}
	if full {
		g.CulpritStack = frameLines(pr.CulpritFrames)
		g.PeerStack = frameLines(pr.PeerFrames)
		for i, e := range pr.Finding.Evidence {
			if i == maxViewEvidence {
				g.Evidence = append(g.Evidence, fmt.Sprintf("… %d more (probing-mcp analyze --json has them)", len(pr.Finding.Evidence)-i))
				break
			}
			g.Evidence = append(g.Evidence, jobtext.CutLine(e, maxViewEvidenceB))
		}
	} else if len(pr.CulpritFrames) > 0 {
		// The innermost user frame is usually the one that explains a divergence.
		shown, _ := StackToShow(pr.CulpritFrames)
		g.CulpritStack = frameLines(shown[:min(3, len(shown))])
	}
	return g
}

// stackAt says whose recorded stack the culprit's is, and from when: the
// Flight Recorder keeps the stack of each collective's call, so for a rank
// that never reached the collective its peers wait in, it is the stack of
// its last recorded one, not where the rank is now.
func stackAt(pr PGReport) string {
	at := pr.CulpritFramesAt
	if at == nil {
		return "the culprit's stack as the Flight Recorder recorded it (not its stack now)"
	}
	op := ""
	if at.Op != "" {
		op = " " + jobtext.Quote(at.Op, jobtext.Name)
	}
	pg := PGLabel(pr.PGName, pr.PGDesc)
	if at.Last {
		return fmt.Sprintf("rank %d's stack at its last recorded collective #%d%s (%s, Flight Recorder), %s before the last recorded event; not where it is now",
			at.Rank, at.Seq, op, pg, fmtAge(at.AgeNs))
	}
	return fmt.Sprintf("rank %d's stack when it called #%d%s (%s, Flight Recorder), %s before the last recorded event", at.Rank, at.Seq, op, pg, fmtAge(at.AgeNs))
}

// frameLines renders a recorded stack: its Python frames first when it is
// a C++ stack (StackToShow), the native ones counted.
func frameLines(frames []Frame) []string {
	var out []string
	frames, native := StackToShow(frames)
	if native > 0 {
		out = append(out, fmt.Sprintf("(%d native frames not shown)", native))
	}
	for i, f := range frames {
		if i == maxViewFrames {
			out = append(out, fmt.Sprintf("... %d more frames", len(frames)-maxViewFrames))
			break
		}
		out = append(out, f.Text())
	}
	return out
}
