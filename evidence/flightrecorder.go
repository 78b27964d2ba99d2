package evidence

import (
	"context"
	"sort"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/diag/flightrecorder"
)

// gatherFR snapshots the Flight Recorder of every live rank that runs
// torch (a process without torch has none, and asking it would only cost
// the deadline) and analyses them together. A rank whose snapshot fails
// is a problem; the others are still analysed.
func gatherFR(ctx context.Context, live []*agent.Agent, problem func(string, ...any)) (*fr.Report, []int) {
	var torch []*agent.Agent
	for _, a := range live {
		if a.Identity != nil && a.Identity.Torch != "" {
			torch = append(torch, a)
		}
	}
	if len(torch) == 0 {
		return nil, nil
	}
	col := agent.CollectFlightRecorder(ctx, torch, false)
	var failed []int
	for _, a := range torch {
		if err := col.Errors[a.PID]; err != nil {
			failed = append(failed, a.Rank())
			problem("rank %d's Flight Recorder: %v", a.Rank(), err)
		}
	}
	if len(col.Loaded.Dumps) == 0 {
		return nil, nil
	}
	rep, err := fr.AnalyzeLoadedContext(ctx, col.Loaded, fr.Options{})
	if err != nil {
		problem("Flight Recorder analysis: %v", err)
		return nil, nil
	}
	var ranks []int
	for _, d := range col.Loaded.Dumps {
		ranks = append(ranks, d.Rank)
	}
	sort.Ints(ranks)
	return rep, ranks
}
