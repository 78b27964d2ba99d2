package tools

import (
	"context"
	"strconv"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/diagnosis"
)

// DiagnoseHangParams are the arguments of diagnose_hang.
type DiagnoseHangParams struct {
	StallSeconds int    `json:"stall_seconds,omitempty" jsonschema:"minimum=0,maximum=86400" jsonschema_description:"Stall length for a confident verdict (default 30)"`
	Detail       string `json:"detail,omitempty" jsonschema:"enum=summary,enum=ranks" jsonschema_description:"summary (default), or ranks: every rank, paged"`
	Offset       int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"First rank row (detail ranks)"`
	Limit        int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=1000" jsonschema_description:"Rank rows per page (detail ranks; default 200)"`
}

// DiagnoseHangResult is the verdict, and with detail "ranks" a page of
// the per-rank listing.
type DiagnoseHangResult struct {
	diagnosis.Report
	RankRows []diagnosis.RankRow `json:"rank_rows,omitempty"`
	// RankTotal is how many ranks the listing has; NextOffset the offset
	// of the next page (absent on the last).
	RankTotal  int  `json:"rank_total,omitempty"`
	NextOffset *int `json:"next_offset,omitempty"`
}

// ModelText is the text content: a compact rendering, not the JSON.
func (r DiagnoseHangResult) ModelText() string {
	t := r.Report.Text()
	if r.RankRows != nil {
		t += "\nEvery rank (page):\n"
		for _, row := range r.RankRows {
			t += "  " + strconv.Itoa(row.Rank) + ": " + row.Doing + "\n"
		}
		if r.NextOffset != nil {
			t += "More ranks: call again with offset " + strconv.Itoa(*r.NextOffset) + ".\n"
		}
	}
	return t
}

// Diagnose runs the evidence service and diagnosis for the server's scope
// (the MCP tool and the CLI share it).
func Diagnose(ctx context.Context, env *Env, p DiagnoseHangParams) (DiagnoseHangResult, error) {
	if err := checkParams(p); err != nil {
		return DiagnoseHangResult{}, userErrorf("%v", err)
	}
	if p.Limit == 0 {
		p.Limit = 200
	}
	st := diagnosis.StallOptions(p.StallSeconds)
	rep, err := diagnosis.Run(ctx, diagnosis.RunOptions{Scope: env.scope(), State: st})
	if err != nil {
		return DiagnoseHangResult{}, scopeError(err)
	}
	res := DiagnoseHangResult{}
	if p.Detail == "ranks" {
		rows, total := rep.RankRows(p.Offset, p.Limit)
		res.RankRows, res.RankTotal = rows, total
		if next := p.Offset + len(rows); next < total {
			res.NextOffset = &next
		}
	}
	rep.Bound()
	res.Report = rep
	return res, nil
}

func diagnoseHang(env *Env) Def {
	tool := mcplib.NewTool("diagnose_hang",
		mcplib.WithToolTitle("Diagnose a hung job"),
		mcplib.WithDescription("Use first when a job seems stuck, slow or dead: whether it is hung at all, then who waits for whom, to the culprit rank, category, line of code and evidence, with the next step. Live or post-mortem."),
		schemas[DiagnoseHangParams, DiagnoseHangResult](env),
		hints(true, false, false, false),
	)
	h, call := typed(func(ctx context.Context, p DiagnoseHangParams) (DiagnoseHangResult, error) {
		return Diagnose(ctx, env, p)
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "the verdict: is the job hung, which rank is the culprit, the category, the line of code, with proof",
		Doc:     "The verdict, in one call: is the job hung at all (`state`), then the culprit ranks, category, line of code, evidence with sources, confirm/refute, and `data_quality` (see `probing-mcp diagnose`). The text is a compact rendering, under 2,000 tokens at 1024 ranks; `detail: \"ranks\"` pages what every rank is doing (`offset`/`limit`)."}
}
