package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/watch"
)

// pipeTimeout bounds one rank's dump through torch's pipe.
const pipeTimeout = 30 * time.Second

// actDumpPipes is watch --act's action on this node: ask torch itself to
// dump each live rank's Flight Recorder through its dump pipe
// (TORCH_NCCL_DEBUG_INFO_PIPE_FILE: a C++ thread writes the dump, no
// Python, no GIL), keep each dump in the history, and audit the action as
// a write (history.audit, tool "watch --act"). The job is not signalled.
func actDumpPipes(opts agent.Options, hist *history.Store, logger *slog.Logger) func(context.Context, watch.Event) string {
	return func(ctx context.Context, e watch.Event) string {
		args, _ := json.Marshal(map[string]any{"action": "dump_pipe", "incident": e.Incident, "kind": string(e.Kind)})
		audit := func(phase, outcome, errText string) {
			if hist == nil {
				return
			}
			if _, err := hist.AddAudit(history.AuditEntry{Tool: "watch --act", Phase: phase, Caller: "watcher", Args: args,
				Outcome: outcome, Error: errText}); err != nil {
				logger.Warn("watch --act: not audited", "err", err)
			}
		}
		audit("call", "", "")
		agents, err := agent.Discover(opts)
		if err != nil {
			audit("result", "error", err.Error())
			return "no dump asked: " + err.Error()
		}
		var dumped, failed []int
		var why []string
		for _, a := range agents {
			if !a.Alive || !a.IsJobRank() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, pipeTimeout)
			s, err := agent.SnapshotViaPipe(sctx, a, pipeTimeout)
			cancel()
			if err != nil {
				failed = append(failed, a.Rank())
				if len(why) < 3 {
					why = append(why, fmt.Sprintf("rank %d: %s", a.Rank(), jobtext.Clip(err.Error(), 160)))
				}
				continue
			}
			d := evidence.FRDump{Rank: a.Rank(), From: fmt.Sprintf("pid %d (torch's dump pipe)", a.PID), Data: s.Data, PID: a.PID,
				Host: nodeHost(), WorldSize: s.WorldSize, Records: s.Records, ProcessGroups: s.ProcessGroups, Version: s.Version,
				Format: s.Format, DumpFunction: "dump pipe"}
			if hist != nil {
				if _, err := hist.AddSnapshot(evidence.SnapshotRow(d, "watch --act")); err != nil {
					logger.Warn("watch --act: dump not kept", "rank", a.Rank(), "err", err)
				}
			}
			dumped = append(dumped, a.Rank())
		}
		sort.Ints(dumped)
		sort.Ints(failed)
		var parts []string
		if len(dumped) > 0 {
			parts = append(parts, "torch dumped the Flight Recorder of ranks "+rankset.Format(dumped)+" through its pipe (history.fr_snapshots, source 'watch --act')")
		}
		if len(failed) > 0 {
			parts = append(parts, "no dump from ranks "+rankset.Format(failed)+" ("+strings.Join(why, "; ")+")")
		}
		if len(parts) == 0 {
			parts = append(parts, "no live rank on this node to ask")
		}
		outcome := "ok"
		if len(dumped) == 0 {
			outcome = "error"
		}
		did := strings.Join(parts, "; ")
		audit("result", outcome, map[bool]string{true: did, false: ""}[outcome == "error"])
		return did
	}
}
