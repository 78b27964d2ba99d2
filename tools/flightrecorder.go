package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// AnalyzeFlightRecorderParams are the arguments of analyze_flight_recorder.
type AnalyzeFlightRecorderParams struct {
	Paths  []string `json:"paths" jsonschema:"minItems=1" jsonschema_description:"Dump files or directories of dumps (walked recursively). Files are named <prefix><rank>, e.g. /tmp/nccl_trace_rank_0; pickle and JSON dumps are both read."`
	Prefix string   `json:"prefix,omitempty" jsonschema_description:"File-name prefix before the rank number; inferred when omitted (like fr_trace --prefix)"`
	PG     string   `json:"pg,omitempty" jsonschema_description:"Only this process group: its name (e.g. 0) or description (e.g. tp)"`
	Ranks  string   `json:"ranks,omitempty" jsonschema_description:"Only groups containing these ranks; a range such as 0-7 or 12 (join several with commas)"`
	Detail string   `json:"detail,omitempty" jsonschema_description:"summary (default) lists problem groups only; full adds healthy groups, lagging-rank tables, culprit stacks and fr_trace's blocks" jsonschema:"enum=summary,enum=full"`
	Offset int      `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Skip this many process groups; pass next_offset from a truncated result"`
	Limit  int      `json:"limit,omitempty" jsonschema:"minimum=0,maximum=50" jsonschema_description:"Process groups per page: default 10 (summary) or 5 (full), max 50"`
}

// AnalyzeFlightRecorderResult is the verdict, bounded for a context window:
// rank sets are ranges, groups are paged, long lists are cut and say so.
type AnalyzeFlightRecorderResult struct {
	Summary        string          `json:"summary"`
	Verdict        string          `json:"verdict"`
	Ranks          RankView        `json:"ranks"`
	ProcessGroups  []GroupView     `json:"process_groups"`
	TotalGroups    int             `json:"total_groups"`
	ProblemGroups  int             `json:"problem_groups"`
	HealthyOmitted int             `json:"healthy_groups_omitted"`
	Offset         int             `json:"offset"`
	NextOffset     int             `json:"next_offset,omitempty"`
	Truncated      bool            `json:"truncated"`
	FRTrace        FRTraceView     `json:"fr_trace"`
	DataQuality    DataQualityView `json:"data_quality"`
	Hint           string          `json:"hint,omitempty"`
	// HistoryID is the row of history.diagnoses this verdict was stored as.
	HistoryID int64 `json:"history_id,omitempty"`
}

// RankView says which ranks were analysed.
type RankView struct {
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
	CulpritStack    []string `json:"culprit_stack,omitempty"`
	PeerStack       []string `json:"peer_stack,omitempty"`
	Evidence        []string `json:"evidence,omitempty"`
	FRTrace         string   `json:"fr_trace"`
}

// FRTraceView is what torch's own analyzer would conclude.
type FRTraceView struct {
	Aborted       string `json:"aborted,omitempty"`
	NotReplayed   string `json:"not_replayed,omitempty"`
	Disagreements int    `json:"groups_where_we_differ"`
}

// DataQualityView lists what limited the analysis, bounded.
type DataQualityView struct {
	Partial       bool     `json:"partial"`
	FileProblems  []string `json:"file_problems,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
	TotalProblems int      `json:"total_file_problems"`
	TotalWarnings int      `json:"total_warnings"`
	Truncated     bool     `json:"truncated"`
}

const (
	maxDQItems     = 8
	maxLagSummary  = 3
	maxStackFrames = 8
	maxPageLimit   = 50
)

func analyzeFlightRecorder(env *Env) Def {
	tool := mcplib.NewTool("analyze_flight_recorder",
		mcplib.WithToolTitle("Analyze Flight Recorder dumps"),
		mcplib.WithDescription("Diagnose a hung or crashed distributed PyTorch job from its Flight Recorder dumps (one file per rank, "+
			"e.g. /tmp/nccl_trace_rank_<N>, written on an NCCL/gloo watchdog timeout). Returns, per process group, the verdict "+
			"(OK, MISSING_RANKS, COLLECTIVE_TYPE_MISMATCH, SIZE_OR_SYNTAX_MISMATCH, COLLECTIVE_DTYPE_MISMATCH, COLLECTIVE_STATE_MISMATCH, UNDECIDED), "+
			"the collective sequence number, the culprit and missing ranks, the ranks that lag behind, and what torch's fr_trace would say. "+
			"Worst groups first; rank sets are ranges."),
		schemas[AnalyzeFlightRecorderParams, AnalyzeFlightRecorderResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p AnalyzeFlightRecorderParams) (AnalyzeFlightRecorderResult, error) {
		return runAnalyzeFlightRecorder(ctx, env, p)
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "verdicts from Flight Recorder dump files: which process group, collective and ranks hang or disagree",
		Doc:     "Verdicts from dump files or directories: per process group, the collective, culprit and missing ranks, lagging ranks, fr_trace's view. Problem groups first. Rank sets are ranges. `detail: \"full\"` adds healthy groups, lag tables and stacks; `offset`/`limit` page the groups."}
}

func runAnalyzeFlightRecorder(ctx context.Context, env *Env, p AnalyzeFlightRecorderParams) (AnalyzeFlightRecorderResult, error) {
	var res AnalyzeFlightRecorderResult
	if len(p.Paths) == 0 {
		return res, userErrorf("paths is empty: pass the dump directory (e.g. /tmp) or the dump files")
	}
	full, err := pageMode(p.Detail, p.Offset, p.Limit)
	if err != nil {
		return res, err
	}
	var ranks []int
	if p.Ranks != "" {
		var err error
		if ranks, err = rankset.Parse(p.Ranks); err != nil {
			return res, userErrorf("%v", err)
		}
	}
	paths := make([]string, 0, len(p.Paths))
	for _, path := range p.Paths {
		real, err := env.Files.Check(path)
		if err != nil {
			return res, err
		}
		paths = append(paths, real)
	}
	// The request's context: a client that gives up (or an HTTP deadline)
	// stops the load and the analysis, and frees what they held.
	loaded, err := fr.LoadContext(ctx, paths, fr.LoadOptions{Prefix: p.Prefix, MaxFileBytes: env.MaxFileBytes, Check: env.Files.checkResolved})
	if err != nil {
		if ctx.Err() != nil {
			return res, stoppedError(ctx)
		}
		return res, userErrorf("%v", err)
	}
	rep, err := fr.AnalyzeLoadedContext(ctx, loaded, fr.Options{PG: p.PG, Ranks: ranks})
	if err != nil {
		return res, stoppedError(ctx)
	}
	if rep.NoMatch != "" {
		return res, &UserError{msg: rep.NoMatch}
	}
	res = viewReport(rep, full, p.Offset, p.Limit)
	if p.Offset == 0 { // later pages are the same analysis
		res.HistoryID = recordDiagnosis(env, p, rep, res)
	}
	return res, nil
}

// stoppedError is the answer when the request ended before the analysis.
func stoppedError(ctx context.Context) error {
	return userErrorf("the Flight Recorder analysis stopped before it finished (%v): analyse fewer dumps, or give the request more time", context.Cause(ctx))
}

// recordDiagnosis keeps the verdict in the persisted history (queryable as
// history.diagnoses after the job and this server are gone). The bounded
// summary view is stored, not the whole report. Failing to record is
// logged, never a reason to withhold the answer.
func recordDiagnosis(env *Env, p AnalyzeFlightRecorderParams, rep *fr.Report, view AnalyzeFlightRecorderResult) int64 {
	if env.History == nil {
		return 0
	}
	inputs, _ := json.Marshal(p)
	report, err := json.Marshal(view)
	if err != nil {
		return 0
	}
	var culprits []int
	for _, pr := range rep.ProcessGroups {
		culprits = append(culprits, pr.CulpritRanks...)
	}
	verdict := rep.Verdict
	if line, _, _ := strings.Cut(rep.Summary, "\n"); line != "" {
		verdict += ": " + line
	}
	id, err := env.History.AddDiagnosis(history.Diagnosis{Kind: "flight_recorder", Inputs: inputs, Verdict: verdict,
		CulpritRanks: rankset.Format(culprits), Report: report})
	if err != nil {
		if env.Logger != nil {
			env.Logger.Warn("diagnosis not recorded in history", "err", err)
		}
		return 0
	}
	return id
}

// pageMode checks the paging arguments both Flight Recorder tools take
// and says whether the full detail was asked for.
func pageMode(detail string, offset, limit int) (full bool, err error) {
	switch detail {
	case "", "summary":
	case "full":
		full = true
	default:
		return false, userErrorf("detail %q is not summary or full", detail)
	}
	if offset < 0 || limit < 0 {
		return false, userErrorf("offset and limit must not be negative")
	}
	return full, nil
}

// viewReport pages and condenses a report. In summary mode only groups with
// a problem are listed; healthy ones are counted.
func viewReport(rep *fr.Report, full bool, offset, limit int) AnalyzeFlightRecorderResult {
	if limit == 0 {
		limit = 10
		if full {
			limit = 5
		}
	}
	limit = min(limit, maxPageLimit)
	res := AnalyzeFlightRecorderResult{
		Summary: clip(rep.Summary, 2000), Verdict: rep.Verdict, TotalGroups: len(rep.ProcessGroups), Offset: offset,
		Ranks: RankView{Dumped: rep.Ranks.DumpedText, MissingDumps: rankSet(rep.Ranks.MissingDump), ExpectedWorld: rep.Ranks.Expected,
			Versions: rep.Ranks.Versions, Formats: rep.Ranks.Formats, TimingEnabled: rep.Ranks.TimingOn},
		ProcessGroups: []GroupView{},
		FRTrace:       FRTraceView{Aborted: clip(rep.FRTrace.Aborted, 2000), NotReplayed: rep.FRTrace.Skipped},
	}
	var listed []fr.PGReport
	for _, pr := range rep.ProcessGroups {
		if pr.Finding.Kind != fr.KindHealthy {
			res.ProblemGroups++
		}
		if pr.FRTrace != nil && !pr.FRTrace.Agrees {
			res.FRTrace.Disagreements++
		}
		if full || pr.Finding.Kind != fr.KindHealthy {
			listed = append(listed, pr)
		} else {
			res.HealthyOmitted++
		}
	}
	for i := offset; i < len(listed) && i < offset+limit; i++ {
		res.ProcessGroups = append(res.ProcessGroups, groupView(listed[i], full))
	}
	if offset+limit < len(listed) {
		res.Truncated, res.NextOffset = true, offset+limit
	}
	if res.HealthyOmitted > 0 {
		res.Hint = fmt.Sprintf("%d healthy group(s) not listed; detail=full lists every group with lagging ranks and stacks", res.HealthyOmitted)
	}
	dq := rep.DataQuality
	res.DataQuality = DataQualityView{Partial: dq.Partial, TotalProblems: len(dq.Files), TotalWarnings: len(dq.Warnings)}
	for i, fp := range dq.Files {
		if i == maxDQItems {
			res.DataQuality.Truncated = true
			break
		}
		res.DataQuality.FileProblems = append(res.DataQuality.FileProblems, fp.Text())
	}
	for i, w := range dq.Warnings {
		if i == maxDQItems {
			res.DataQuality.Truncated = true
			break
		}
		res.DataQuality.Warnings = append(res.DataQuality.Warnings, w)
	}
	return res
}

// maxViewSet bounds a rank set in the view: a group of a million
// members, every other one without a dump, is megabytes of ranges.
const maxViewSet = 1024

// maxViewEvidence bounds a group's evidence lines (one per wrapped ring
// in a large job).
const maxViewEvidence = 50

func rankSet(ranks []int) string { return rankset.FormatMax(ranks, maxViewSet) }

func groupView(pr fr.PGReport, full bool) GroupView {
	// The names are the dump's text: clipped (a group whose name is
	// longer is picked by its ranks, not by pg).
	g := GroupView{PGName: jobtext.Clip(pr.PGName, 1<<10), PGDesc: jobtext.Clip(pr.PGDesc, 1<<10), Ranks: pr.MembersText, Verdict: pr.Verdict, Kind: pr.Finding.Kind,
		Confidence: pr.Finding.Confidence, CollectiveSeqID: pr.CollectiveSeqID, ProfilingName: jobtext.Clip(pr.ProfilingName, jobtext.Func),
		MissingRanks: rankSet(pr.MissingRanks), CulpritRanks: rankSet(pr.CulpritRanks),
		MissingDumps: rankSet(pr.MissingDumps), Finding: pr.Finding.Line}
	nLag := maxLagSummary
	if full {
		nLag = len(pr.LaggingRanks)
	}
	for i, l := range pr.LaggingRanks {
		if i == nLag {
			g.Lagging = append(g.Lagging, fmt.Sprintf("... %d more (detail=full)", len(pr.LaggingRanks)-nLag))
			break
		}
		line := fmt.Sprintf("rank %d: enqueued #%d, completed #%d, behind %d", l.Rank, l.LastEnqueued, l.LastCompleted, l.Behind)
		if l.Note != "" {
			line += " (" + l.Note + ")"
		}
		g.Lagging = append(g.Lagging, line)
	}
	if n := pr.FRTrace; n != nil {
		switch {
		case n.Agrees:
			g.FRTrace = "agrees"
		default:
			g.FRTrace = "says " + n.Verdict
			if len(n.CulpritRanks) > 0 {
				g.FRTrace += " (culprits " + rankSet(n.CulpritRanks) + ")"
			}
			if full {
				g.FRTrace += ": " + jobtext.Quote(n.Why, jobtext.Line) // its words, the dump's text in them
			} else {
				g.FRTrace += "; detail=full explains the difference"
			}
		}
	}
	for _, f := range pr.Secondary {
		g.OtherFindings = append(g.OtherFindings, f.Kind+": "+f.Line)
	}
	if a := pr.Arrival; a != nil {
		g.OtherFindings = append(g.OtherFindings, "arrivals: "+a.Line)
	}
	if full {
		g.CulpritStack = frameLines(pr.CulpritFrames)
		g.PeerStack = frameLines(pr.PeerFrames)
		for i, e := range pr.Finding.Evidence {
			if i == maxViewEvidence {
				g.Evidence = append(g.Evidence, fmt.Sprintf("… %d more (probing-mcp analyze --json has them)", len(pr.Finding.Evidence)-i))
				break
			}
			g.Evidence = append(g.Evidence, clip(e, 2000))
		}
	} else if len(pr.CulpritFrames) > 0 {
		// The innermost user frame is usually the one that explains a divergence.
		shown, _ := fr.StackToShow(pr.CulpritFrames)
		g.CulpritStack = frameLines(shown[:min(3, len(shown))])
	}
	return g
}

// frameLines renders a recorded stack: its Python frames first when it is
// a C++ stack (fr.StackToShow), the native ones counted.
func frameLines(frames []fr.Frame) []string {
	var out []string
	frames, native := fr.StackToShow(frames)
	if native > 0 {
		out = append(out, fmt.Sprintf("(%d native frames not shown)", native))
	}
	for i, f := range frames {
		if i == maxStackFrames {
			out = append(out, fmt.Sprintf("... %d more frames", len(frames)-maxStackFrames))
			break
		}
		out = append(out, f.Text())
	}
	return out
}

// SnapshotFlightRecorderParams are the arguments of snapshot_flight_recorder.
type SnapshotFlightRecorderParams struct {
	Target
	OnlyActive bool   `json:"only_active,omitempty" jsonschema_description:"Only collectives not yet completed (smaller dumps)"`
	Detail     string `json:"detail,omitempty" jsonschema_description:"summary (default) or full, as analyze_flight_recorder" jsonschema:"enum=summary,enum=full"`
	Offset     int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Skip this many process groups; pass next_offset from a truncated result"`
	Limit      int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=50" jsonschema_description:"Process groups per page (default 10 summary / 5 full, max 50)"`
}

// SnapshotView is one rank's snapshot.
type SnapshotView struct {
	PID           int    `json:"pid"`
	Rank          int    `json:"rank"`
	Records       int    `json:"records"`
	ProcessGroups int    `json:"process_groups"`
	Version       string `json:"version"`
	Bytes         int    `json:"bytes"`
	DumpFunction  string `json:"dump_function,omitempty"`
	HistoryID     int64  `json:"history_id,omitempty"`
}

// SnapshotFlightRecorderResult is the live analysis and what was captured.
type SnapshotFlightRecorderResult struct {
	AnalyzeFlightRecorderResult
	Snapshots []SnapshotView `json:"snapshots"`
	// Failed lists the processes whose snapshot failed, with why.
	Failed []string `json:"failed,omitempty"`
	// Coverage says which nodes answered (the whole-job scope only).
	Coverage *CoverageView `json:"coverage,omitempty"`
}

func snapshotFlightRecorder(env *Env) Def {
	tool := mcplib.NewTool("snapshot_flight_recorder",
		mcplib.WithToolTitle("Snapshot the live Flight Recorder"),
		mcplib.WithDescription("Take a live PyTorch Flight Recorder snapshot from every training process on this node (or pids/ranks) through "+
			"their agents, store the dumps in history.fr_snapshots, and analyse them together as analyze_flight_recorder does: per process group, "+
			"the collective and sequence number each rank reached, the culprit and missing ranks, and fr_trace's view. Needs torch.distributed "+
			"in the processes (the agent turns recording on with a 2000-entry buffer when nothing else set one)."),
		schemas[SnapshotFlightRecorderParams, SnapshotFlightRecorderResult](env),
		hints(true, false, false, false),
	)
	h, call := typed(func(ctx context.Context, p SnapshotFlightRecorderParams) (SnapshotFlightRecorderResult, error) {
		var res SnapshotFlightRecorderResult
		full, err := pageMode(p.Detail, p.Offset, p.Limit)
		if err != nil {
			return res, err
		}
		ans, err := env.scope().FlightRecorder(ctx, evidence.Selection{PIDs: p.PIDs, Ranks: p.Ranks}, p.OnlyActive)
		if err != nil {
			return res, scopeError(err)
		}
		res.Coverage = coverageView(ans.Coverage)
		res.Failed = ans.Failed
		res.Snapshots = []SnapshotView{}
		for _, d := range ans.Dumps {
			res.Snapshots = append(res.Snapshots, SnapshotView{PID: d.PID, Rank: d.Rank, Records: d.Records, ProcessGroups: d.ProcessGroups,
				Version: d.Version, Bytes: len(d.Data), DumpFunction: d.DumpFunction, HistoryID: recordSnapshot(env, d)})
		}
		if len(ans.Loaded.Dumps) == 0 {
			where := ""
			if ans.Coverage != nil {
				where = " (" + ans.Coverage.Text() + ")"
			}
			return res, userErrorf("no process returned a Flight Recorder snapshot%s: %s", where, strings.Join(res.Failed, "; "))
		}
		rep, err := fr.AnalyzeLoadedContext(ctx, ans.Loaded, fr.Options{})
		if err != nil {
			return res, stoppedError(ctx)
		}
		res.AnalyzeFlightRecorderResult = viewReport(rep, full, p.Offset, p.Limit)
		if p.Offset == 0 {
			res.HistoryID = recordDiagnosis(env, AnalyzeFlightRecorderParams{Paths: []string{"live snapshot"}}, rep, res.AnalyzeFlightRecorderResult)
		}
		return res, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "live Flight Recorder snapshot of every local rank, stored and analysed: the hung collective and the culprit ranks",
		Doc:     "A live Flight Recorder snapshot of every local rank, stored in history and analysed as `analyze_flight_recorder` does."}
}

// recordSnapshot stores one dump in the history (best effort).
func recordSnapshot(env *Env, d evidence.FRDump) int64 {
	if env.History == nil {
		return 0
	}
	var rank *int
	if d.Rank >= 0 {
		r := d.Rank
		rank = &r
	}
	format := d.Format
	if format == "" {
		format = "pickle"
	}
	id, err := env.History.AddSnapshot(history.Snapshot{Host: d.Host, PID: d.PID, Rank: rank, WorldSize: d.WorldSize,
		Source: "live", Format: format, TraceVersion: d.Version, Entries: d.Records, Data: d.Data, Note: d.DumpFunction})
	if err != nil {
		env.Logger.Warn("snapshot not recorded in history", "pid", d.PID, "err", err)
		return 0
	}
	return id
}
