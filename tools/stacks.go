package tools

import (
	"context"
	"encoding/json"
	"slices"
	"sort"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// GetStacksParams are the arguments of get_stacks.
type GetStacksParams struct {
	Target
	Merge       *bool `json:"merge,omitempty" jsonschema_description:"Merge identical stacks (default true)"`
	IncludeIdle bool  `json:"include_idle,omitempty" jsonschema_description:"Also list idle background threads"`
	MaxGroups   int   `json:"max_groups,omitempty" jsonschema:"minimum=0,maximum=50" jsonschema_description:"Stack groups (default 10)"`
	MaxFrames   int   `json:"max_frames,omitempty" jsonschema:"minimum=0,maximum=200" jsonschema_description:"Frames per stack, innermost kept (default 30)"`
}

// GetStacksResult is the merged account, bounded.
type GetStacksResult struct {
	stacks.Merged
	// Sources says how each process's stacks were obtained (by pid; in
	// the whole-job scope, each source with its ranks): agent (the
	// in-process agent answered), faulthandler (the agent did not answer;
	// the GIL-free signal dump was read), proc (no Python frames: kernel
	// thread states only), probing (the original agent: every thread, one
	// request each).
	Sources map[string]string `json:"sources"`
	// Coverage says which nodes answered (the whole-job scope only).
	Coverage *CoverageView `json:"coverage,omitempty"`
	// HistoryIDs are the rows of history.stack_captures written.
	HistoryIDs []int64 `json:"history_ids,omitempty"`
	// Processes lists every thread per process when merge is false.
	Processes []stacks.Process `json:"processes,omitempty"`
}

func getStacks(env *Env) Def {
	tool := mcplib.NewTool("get_stacks",
		mcplib.WithToolTitle("Get stacks of every thread"),
		mcplib.WithDescription("Use to see what every thread of the training processes is doing now: identical stacks merged by rank, odd ones first; works on a wedged process."),
		schemas[GetStacksParams, GetStacksResult](env),
		hints(true, false, false, false),
	)
	h, call := typed(func(ctx context.Context, p GetStacksParams) (GetStacksResult, error) {
		ans, err := env.scope().Stacks(ctx, evidence.Selection{PIDs: p.PIDs, Ranks: p.Ranks})
		if err != nil {
			return GetStacksResult{}, scopeError(err)
		}
		procs := ans.Processes
		res := GetStacksResult{Sources: ans.Sources, Coverage: coverageView(ans.Coverage)}
		res.Merged = stacks.Merge(procs, stacks.MergeOptions{MaxGroups: p.MaxGroups, MaxFrames: p.MaxFrames, IncludeIdle: p.IncludeIdle})
		if p.Merge != nil && !*p.Merge {
			res.Processes = boundProcesses(procs, p.MaxFrames)
			res.Groups = nil
		}
		res.HistoryIDs = recordStacks(env, procs)
		return res, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "every thread's stack in every local process, identical stacks merged with their ranks, odd ones out first",
		Doc:     "Every thread's stack in every local process (or `pids`/`ranks`). Identical stacks are merged with their rank ranges, odd ones out first, idle threads collapsed. It falls back to the GIL-free faulthandler dump and adds /proc thread states. Stored in history."}
}

// boundProcesses keeps the per-process listing within the frame budget.
func boundProcesses(procs []stacks.Process, maxFrames int) []stacks.Process {
	if maxFrames <= 0 {
		maxFrames = 30
	}
	out := make([]stacks.Process, len(procs))
	for i, p := range procs {
		// Names, paths and errors are the job's (or a node's): clipped.
		p.Host, p.Err, p.Source = jobtext.Clip(p.Host, jobtext.Name), jobtext.Clip(p.Err, 1<<10), jobtext.Clip(p.Source, jobtext.Name)
		out[i] = p
		out[i].Threads = make([]stacks.Thread, len(p.Threads))
		for j, t := range p.Threads {
			if len(t.Frames) > maxFrames {
				t.Frames, t.FramesTruncated = t.Frames[:maxFrames], true
			}
			t.Frames = slices.Clone(t.Frames)
			for k := range t.Frames {
				f := &t.Frames[k]
				f.File, f.Function = jobtext.ClipTail(f.File, jobtext.Path), jobtext.Clip(f.Function, jobtext.Func)
			}
			t.Name, t.WChan, t.State = jobtext.Clip(t.Name, jobtext.Name), jobtext.Clip(t.WChan, jobtext.Name), jobtext.Clip(t.State, 16)
			out[i].Threads[j] = t
		}
	}
	return out
}

// recordStacks stores each capture in the history (best effort).
func recordStacks(env *Env, procs []stacks.Process) []int64 {
	if env.History == nil {
		return nil
	}
	var ids []int64
	for _, p := range procs {
		if len(p.Threads) == 0 {
			continue
		}
		b, err := json.Marshal(p)
		if err != nil {
			continue
		}
		method := p.Source
		if method == "probing" {
			method = "agent"
		}
		var rank *int
		if p.Rank >= 0 {
			r := p.Rank
			rank = &r
		}
		id, err := env.History.AddStackCapture(history.StackCapture{Host: p.Host, PID: p.PID, Rank: rank, Method: method,
			ThreadCount: len(p.Threads), Stacks: b})
		if err != nil {
			env.Logger.Warn("stack capture not recorded in history", "pid", p.PID, "err", err)
			continue
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
