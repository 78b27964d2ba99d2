package tools

import (
	"context"
	"encoding/json"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// AnalyzeFlightRecorderParams are the arguments of analyze_flight_recorder.
type AnalyzeFlightRecorderParams struct {
	Paths  []string `json:"paths" jsonschema:"minItems=1" jsonschema_description:"Dump files or directories (walked), named like nccl_trace_rank_3"`
	Prefix string   `json:"prefix,omitempty" jsonschema_description:"File-name prefix before the rank"`
	PG     string   `json:"pg,omitempty" jsonschema_description:"Only this process group"`
	Ranks  string   `json:"ranks,omitempty" jsonschema_description:"Only groups with these ranks, e.g. 0-7,12"`
	Detail string   `json:"detail,omitempty" jsonschema_description:"summary (default), or full: healthy groups, lags, stacks" jsonschema:"enum=summary,enum=full"`
	Offset int      `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Groups to skip (next_offset)"`
	Limit  int      `json:"limit,omitempty" jsonschema:"minimum=0,maximum=50" jsonschema_description:"Groups per page (default 10, full 5)"`
}

// AnalyzeFlightRecorderResult is the verdict, bounded for a context window
// (fr.View: rank sets are ranges, groups are paged, long lists are cut and
// say so), and where it was stored.
type AnalyzeFlightRecorderResult struct {
	fr.View
	// HistoryID is the row of history.diagnoses this verdict was stored as.
	HistoryID int64 `json:"history_id,omitempty"`

	// analysis is the whole report the view condenses, for a picture of
	// it (mcp's MCP App page); in neither the JSON nor the schema.
	analysis *fr.Report
}

// Analysis is the whole report behind the view (nil when the result was
// not made here), for a picture of it.
func (r AnalyzeFlightRecorderResult) Analysis() *fr.Report { return r.analysis }

// The view's parts, by the names this package gave them before they moved.
type (
	RankView        = fr.ViewRanks
	GroupView       = fr.GroupView
	FRTraceView     = fr.ViewFRTrace
	DataQualityView = fr.ViewDataQuality
)

const (
	// maxDQItems bounds a result's list of problems (skills' too).
	maxDQItems = 8
	// maxPageLimit is the tools' largest page of groups (their schema's).
	maxPageLimit = 50
)

func analyzeFlightRecorder(env *Env) Def {
	tool := mcplib.NewTool("analyze_flight_recorder",
		mcplib.WithToolTitle("Analyze Flight Recorder dumps"),
		mcplib.WithDescription("Use on Flight Recorder dump files (one per rank, e.g. /tmp/nccl_trace_rank_N): per process group the verdict, the hung collective and the culprit ranks, problem groups first."),
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
	res.analysis = rep
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

// viewReport pages and condenses a report (fr.Report.View) for the tools.
// In summary mode only groups with a problem are listed; healthy ones are
// counted.
func viewReport(rep *fr.Report, full bool, offset, limit int) AnalyzeFlightRecorderResult {
	return AnalyzeFlightRecorderResult{View: rep.View(fr.ViewOptions{Full: full, Offset: offset, Limit: min(limit, maxPageLimit)})}
}

// SnapshotFlightRecorderParams are the arguments of snapshot_flight_recorder.
type SnapshotFlightRecorderParams struct {
	Target
	OnlyActive bool   `json:"only_active,omitempty" jsonschema_description:"Only pending collectives"`
	Detail     string `json:"detail,omitempty" jsonschema_description:"summary (default), or full: healthy groups, lags, stacks" jsonschema:"enum=summary,enum=full"`
	Offset     int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Groups to skip (next_offset)"`
	Limit      int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=50" jsonschema_description:"Groups per page (default 10, full 5)"`
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
		mcplib.WithDescription("Use on a live job whose collectives may hang: snapshots each rank's Flight Recorder through its agent, keeps it, and analyses it like analyze_flight_recorder."),
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
	id, err := env.History.AddSnapshot(evidence.SnapshotRow(d, "live"))
	if err != nil {
		env.Logger.Warn("snapshot not recorded in history", "pid", d.PID, "err", err)
		return 0
	}
	return id
}
